/* bulkload-gen: write scidb96 (or ticks) records START .. START+N-1 to standard output.
 *
 * Usage: bulkload-gen N [START]
 *        bulkload-gen --layout ticks [--t0 NS] [--step NS] N [START]
 *
 * Exit codes:
 *   0  all N records written
 *   1  a write error (e.g. disk full): message on stderr
 *   2  bad arguments: usage on stderr
 *   3  standard output was closed early (broken pipe, e.g. `| head`): quiet, output truncated
 */
#include "scidb96.h"
#include "ticks.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXIT_WRITE_ERROR 1
#define EXIT_USAGE 2
#define EXIT_CLOSED 3

/* Records per write: 10922 * 96 = 1,048,512 bytes (just under 1 MiB, a multiple of 96);
 * 25575 * 41 = 1,048,575 bytes for ticks. */
#define BLOCK_RECORDS 10922u
#define TICKS_BLOCK_RECORDS 25575u

static const char USAGE[] =
    "usage: bulkload-gen N [START]\n"
    "       bulkload-gen --layout ticks [--t0 NS] [--step NS] N [START]\n"
    "\n"
    "Write N records of layout scidb96 (96 bytes each: d0..d9 float64, i0..i3 int32,\n"
    "little-endian), records START .. START+N-1 (START defaults to 0), to standard output.\n"
    "N and START are unsigned decimal integers; START+N-1 must not exceed 18446744073709551615.\n"
    "--layout ticks: records of layout ticks (41 bytes each) instead, as gen://ticks: record 0\n"
    "at --t0 NS (a signed decimal, ns since 1970-01-01T00:00Z; default 1767364200000000000 =\n"
    "2026-01-02T14:30:00Z), one record every --step NS (default 1000000000, at least 1).\n"
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

/* Parse a signed decimal (an optional '-', then digits). 0 on success. */
static int parse_i64(const char *s, int64_t *out)
{
    uint64_t v;
    int rc;
    if (*s == '-') {
        rc = parse_u64(s + 1, &v);
        if (rc)
            return rc;
        if (v > (uint64_t)INT64_MAX + 1)
            return -2;
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
        return 0;
    }
    rc = parse_u64(s, &v);
    if (rc)
        return rc;
    if (v > (uint64_t)INT64_MAX)
        return -2;
    *out = (int64_t)v;
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
    uint64_t n = 0, start = 0, step = TICKS_DEFAULT_STEP, block, size;
    int64_t t0 = TICKS_DEFAULT_T0;
    int ticks = 0, ticks_opts = 0, a = 1, rc;
    unsigned char *buf;

    if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        fputs(USAGE, stdout);
        return 0;
    }
    /* options first: --layout NAME, --t0 NS, --step NS */
    while (a < argc && strncmp(argv[a], "--", 2) == 0) {
        const char *opt = argv[a];
        if (strcmp(opt, "--layout") && strcmp(opt, "--t0") && strcmp(opt, "--step"))
            return usage("unknown option", opt);
        if (a + 1 >= argc)
            return usage("option needs a value", opt);
        if (strcmp(opt, "--layout") == 0) {
            if (strcmp(argv[a + 1], "ticks") == 0)
                ticks = 1;
            else if (strcmp(argv[a + 1], "scidb96") == 0)
                ticks = 0;
            else
                return usage("unknown layout (use scidb96 or ticks)", argv[a + 1]);
        } else if (strcmp(opt, "--t0") == 0) {
            rc = parse_i64(argv[a + 1], &t0);
            if (rc)
                return usage("--t0 must be a signed decimal integer of ns within int64", argv[a + 1]);
            ticks_opts = 1;
        } else {
            rc = parse_u64(argv[a + 1], &step);
            if (rc || step == 0)
                return usage("--step must be an unsigned decimal integer of ns, at least 1", argv[a + 1]);
            ticks_opts = 1;
        }
        a += 2;
    }
    if (ticks_opts && !ticks)
        return usage("--t0 and --step are options of --layout ticks", NULL);
    if (a >= argc)
        return usage("missing N", NULL);
    if (argc - a > 2)
        return usage("too many arguments", argv[a + 2]);
    rc = parse_u64(argv[a], &n);
    if (rc == -2)
        return usage("N is too large", argv[a]);
    if (rc)
        return usage("N must be an unsigned decimal integer", argv[a]);
    if (argc - a == 2) {
        rc = parse_u64(argv[a + 1], &start);
        if (rc == -2)
            return usage("START is too large", argv[a + 1]);
        if (rc)
            return usage("START must be an unsigned decimal integer", argv[a + 1]);
    }
    if (n > 0 && n - 1 > UINT64_MAX - start)
        return usage("START+N-1 exceeds the largest record index 18446744073709551615", NULL);

    /* A closed pipe must surface as EPIPE (exit 3), not kill us with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);

    if (n == 0)
        return 0;
    block = ticks ? TICKS_BLOCK_RECORDS : BLOCK_RECORDS;
    size = ticks ? TICKS_RECORD_SIZE : SCIDB96_RECORD_SIZE;
    buf = aligned_alloc(64, (size_t)(block * size + 63) / 64 * 64);
    if (!buf) {
        fprintf(stderr, "bulkload-gen: out of memory\n");
        return EXIT_WRITE_ERROR;
    }
    rc = 0;
    while (n > 0) {
        uint64_t k = n < block ? n : block;
        if (ticks)
            ticks_fill(buf, start, k, t0, step);
        else
            scidb96_fill(buf, start, k);
        rc = write_all(buf, (size_t)(k * size));
        if (rc)
            break;
        start += k; /* may wrap to 0 only after the very last record */
        n -= k;
    }
    free(buf);
    return rc;
}
