/* bulkload-gen: write scidb96 records START .. START+N-1 to standard output.
 *
 * Usage: bulkload-gen N [START]
 *
 * Exit codes:
 *   0  all N records written
 *   1  a write error (e.g. disk full): message on stderr
 *   2  bad arguments: usage on stderr
 *   3  standard output was closed early (broken pipe, e.g. `| head`): quiet, output truncated
 */
#include "scidb96.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXIT_WRITE_ERROR 1
#define EXIT_USAGE 2
#define EXIT_CLOSED 3

/* Records per write: 10922 * 96 = 1,048,512 bytes (just under 1 MiB, a multiple of 96). */
#define BLOCK_RECORDS 10922u

static const char USAGE[] =
    "usage: bulkload-gen N [START]\n"
    "\n"
    "Write N records of layout scidb96 (96 bytes each: d0..d9 float64, i0..i3 int32,\n"
    "little-endian), records START .. START+N-1 (START defaults to 0), to standard output.\n"
    "N and START are unsigned decimal integers; START+N-1 must not exceed 18446744073709551615.\n"
    "\n"
    "exit status: 0 done; 1 write error; 2 bad arguments;\n"
    "             3 output closed early (broken pipe): output is truncated, nothing is printed\n";

static int usage(const char *problem, const char *arg)
{
    if (problem) {
        if (arg)
            fprintf(stderr, "bulkload-gen: %s: '%s'\n", problem, arg);
        else
            fprintf(stderr, "bulkload-gen: %s\n", problem);
    }
    fputs(USAGE, stderr);
    return EXIT_USAGE;
}

/* Parse a plain unsigned decimal (digits only, no sign, no spaces, no junk). 0 on success. */
static int parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (*s == '\0')
        return -1;
    for (; *s; s++) {
        unsigned d;
        if (*s < '0' || *s > '9')
            return -1;
        d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -2;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* Write all of buf; 0, or EXIT_CLOSED / EXIT_WRITE_ERROR. */
static int write_all(const unsigned char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(STDOUT_FILENO, buf, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EPIPE)
                return EXIT_CLOSED;
            fprintf(stderr, "bulkload-gen: cannot write to standard output: %s\n", strerror(errno));
            return EXIT_WRITE_ERROR;
        }
        buf += (size_t)w;
        len -= (size_t)w;
    }
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t n = 0, start = 0;
    unsigned char *buf;
    int rc;

    if (argc < 2)
        return usage("missing N", NULL);
    if (argc > 3)
        return usage("too many arguments", argv[3]);
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        fputs(USAGE, stdout);
        return 0;
    }
    rc = parse_u64(argv[1], &n);
    if (rc == -2)
        return usage("N is too large", argv[1]);
    if (rc)
        return usage("N must be an unsigned decimal integer", argv[1]);
    if (argc == 3) {
        rc = parse_u64(argv[2], &start);
        if (rc == -2)
            return usage("START is too large", argv[2]);
        if (rc)
            return usage("START must be an unsigned decimal integer", argv[2]);
    }
    if (n > 0 && n - 1 > UINT64_MAX - start)
        return usage("START+N-1 exceeds the largest record index 18446744073709551615", NULL);

    /* A closed pipe must surface as EPIPE (exit 3), not kill us with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);

    if (n == 0)
        return 0;
    buf = aligned_alloc(64, (size_t)BLOCK_RECORDS * SCIDB96_RECORD_SIZE);
    if (!buf) {
        fprintf(stderr, "bulkload-gen: out of memory\n");
        return EXIT_WRITE_ERROR;
    }
    while (n > 0) {
        uint64_t k = n < BLOCK_RECORDS ? n : BLOCK_RECORDS;
        scidb96_fill(buf, start, k);
        rc = write_all(buf, (size_t)k * SCIDB96_RECORD_SIZE);
        if (rc)
            break;
        start += k; /* may wrap to 0 only after the very last record */
        n -= k;
    }
    free(buf);
    if (rc == EXIT_CLOSED)
        return EXIT_CLOSED;
    if (rc)
        return rc;
    return 0;
}
