/* replay_main.c: a plain driver for a libFuzzer target, so that ctest replays the committed corpora
 * with any compiler and no libFuzzer: calls LLVMFuzzerInitialize (when the target defines it),
 * then LLVMFuzzerTestOneInput on every file of the directories given. The targets abort on a
 * broken property, so a failing input fails the test; the ASan CI build checks memory too.
 *   replay_TARGET DIR...   prints "N passed, 0 failed" */
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int replay_file(const char *path, long *count)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!buf || got != (size_t)n) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        free(buf);
        return 1;
    }
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    (*count)++;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR...\n", argv[0]);
        return 2;
    }
    if (LLVMFuzzerInitialize && LLVMFuzzerInitialize(&argc, &argv) != 0)
        return 1;
    long count = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        DIR *d = opendir(argv[i]);
        if (!d) {
            fprintf(stderr, "replay: %s is not a directory\n", argv[i]);
            return 2;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
            char path[4096];
            struct stat st;
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
                bad |= replay_file(path, &count);
        }
        closedir(d);
    }
    if (count == 0) {
        fprintf(stderr, "replay: no inputs found\n");
        return 1;
    }
    printf("%ld passed, 0 failed\n", count);
    return bad;
}
