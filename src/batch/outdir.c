/* OUTDIR's files, kept to the directory the user named: one job at a time holds it (an
 * flock'd lpx.lock naming the holder's PID), and nothing planted in it is followed (every
 * file is opened with O_NOFOLLOW and must be a regular file; the summary is written to a
 * mkstemp temporary there and renamed). */
#include "batch/job.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The names lpx writes in an OUTDIR; a link under any of them is refused. */
static const char *const out_names[] = {"results.jsonl", "failures.jsonl",   "run.log",
                                        "summary.json",  "summary.json.tmp", LPX_BATCH_LOCK};

int lpx_batch_open_in(const char *dir, const char *name, int flags) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    /* O_NONBLOCK: a planted FIFO must not hang the open; it is refused below */
    int fd = open(p, flags | O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0) {
        if (errno == ELOOP)
            lpx_errorf(LPX_ERR_IO, "%s: a symbolic link (refused: lpx follows no link in OUTDIR)",
                       p);
        else
            lpx_errorf(LPX_ERR_IO, "cannot write in %s: %s", dir, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        lpx_errorf(LPX_ERR_IO, "%s: not a regular file (refused)", p);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

lpx_status lpx_batch_check_links(const char *dir) {
    for (size_t i = 0; i < sizeof out_names / sizeof *out_names; i++) {
        char p[4096];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, out_names[i]);
        if (lstat(p, &sb) == 0 && S_ISLNK(sb.st_mode))
            return lpx_errorf(LPX_ERR_IO,
                              "%s: a symbolic link (refused: lpx follows no link in OUTDIR)", p);
    }
    return LPX_OK;
}

lpx_status lpx_batch_lock(const char *dir, int *fd) {
    LPX_TRY(lpx_batch_check_links(dir));
    *fd = lpx_batch_open_in(dir, LPX_BATCH_LOCK, 0);
    if (*fd < 0) return LPX_ERR_IO;
    if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        char buf[32] = {0};
        ssize_t n = pread(*fd, buf, sizeof buf - 1, 0);
        long pid = n > 0 ? strtol(buf, NULL, 10) : 0;
        close(*fd);
        *fd = -1;
        if (err != EWOULDBLOCK)
            return lpx_errorf(LPX_ERR_IO, "%s/%s: cannot lock: %s", dir, LPX_BATCH_LOCK,
                              strerror(err));
        if (pid > 0)
            return lpx_errorf(LPX_ERR_BUSY,
                              "%s is in use by another lpx batch (PID %ld holds %s/%s): wait for "
                              "it to end, or stop it",
                              dir, pid, dir, LPX_BATCH_LOCK);
        return lpx_errorf(LPX_ERR_BUSY, "%s is in use by another lpx batch (it holds %s/%s)", dir,
                          dir, LPX_BATCH_LOCK);
    }
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (ftruncate(*fd, 0) != 0 || pwrite(*fd, buf, (size_t)n, 0) != n)
        return lpx_errorf(LPX_ERR_IO, "%s/%s: cannot write: %s", dir, LPX_BATCH_LOCK,
                          strerror(errno));
    return LPX_OK;
}

bool lpx_batch_write_atomic(const char *dir, const char *name, const char *text) {
    char tmp[4096], path[4096];
    snprintf(tmp, sizeof tmp, "%s/.%s.XXXXXX", dir, name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = mkstemp(tmp);
    if (fd < 0) return false;
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    size_t len = strlen(text), off = 0;
    bool ok = fchmod(fd, 0644) == 0;
    while (ok && off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        ok = w > 0;
        if (ok) off += (size_t)w;
    }
    ok = ok && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    /* rename replaces a link at path, never writes through it */
    ok = ok && rename(tmp, path) == 0;
    if (!ok) {
        int saved = errno;
        unlink(tmp);
        errno = saved;
    }
    return ok;
}
