/* version.c: the library's version at run time, which a program compares with the BATON_VERSION
 * it was compiled against (a shared libbaton may be newer than the header). */
#include "baton/baton.h"

#define STR_(x) #x
#define STR(x)  STR_(x)

unsigned int baton_version(void)
{
    return BATON_VERSION;
}

const char *baton_version_string(void)
{
    return STR(BATON_VERSION_MAJOR) "." STR(BATON_VERSION_MINOR) "." STR(BATON_VERSION_PATCH);
}
