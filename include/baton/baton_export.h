/* baton_export.h: BATON_API, the one mark of baton's exported functions. The library is built
 * with hidden visibility (-fvisibility=hidden), so a function is exported from libbaton.so only
 * when a public header declares it with BATON_API; everything else stays internal, and a test
 * (scripts/check-exports.py) fails when libbaton.so exports a symbol no header declares. */
#ifndef BATON_EXPORT_H
#define BATON_EXPORT_H

#ifndef BATON_API
#if defined(_WIN32) || defined(__CYGWIN__)
/* A DLL build defines BATON_BUILD_SHARED; its users need no dllimport for functions. */
#if defined(BATON_BUILD_SHARED)
#define BATON_API __declspec(dllexport)
#else
#define BATON_API
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define BATON_API __attribute__((visibility("default")))
#else
#define BATON_API
#endif
#endif

#endif /* BATON_EXPORT_H */
