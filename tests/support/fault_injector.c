// tests/support/fault_injector.c: an LD_PRELOAD library that makes one kind of
// file-system call fail (or never return) on one rank, as failing storage does.
// It wraps the libc entry points that the trainer, HDF5's POSIX driver and
// Open MPI's MPI-IO reach through the dynamic linker: open/open64/openat/
// openat64 (and the fortified __open_2 forms), write/pwrite/pwrite64/writev/
// pwritev, read/pread/pread64/readv/preadv/preadv64 (and the fortified
// __read_chk/__pread_chk/__pread64_chk), fsync/fdatasync, rename/renameat/
// renameat2, close. (HDF5's sec2 driver and the checkpoint reader use pread;
// Open MPI's MPI-IO (OMPIO) preads too.)
//
// Configured by the environment (unset SHARDTRAIN_FAULT_CALL: every call passes):
//   SHARDTRAIN_FAULT_CALL   open | write | read | fsync | rename | close
//   SHARDTRAIN_FAULT_RANK   the rank that fails (OMPI_COMM_WORLD_RANK or PMI_RANK); default 0
//   SHARDTRAIN_FAULT_PATH   a substring the file's path must hold (default ".h5.partial"; for
//                           rename either path; for fd calls the path /proc/self/fd names)
//   SHARDTRAIN_FAULT_NTH    the matching call that fails first (1-based, counted on that rank); default 1
//   SHARDTRAIN_FAULT_TIMES  how many matching calls fail from there on (default 1; 0: all)
//   SHARDTRAIN_FAULT_ERRNO  EIO | ENOSPC | EDQUOT | a number | HANG (the call never returns:
//                           storage that stops answering) | SLOW (the call succeeds after
//                           SHARDTRAIN_FAULT_SLOW_S seconds, default 5: a busy server); default EIO
//   SHARDTRAIN_FAULT_TRACE  1: print every matching call (to find which occurrence to fail)
// Every injected fault is reported on stderr:
//   fault injector: rank 1: fsync(/.../step_00000010.h5.partial) -> EIO (matching call 1)
// Counting is per process across threads (an atomic counter).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum { kOpen, kWrite, kFsync, kRename, kClose, kRead, kNone };

static int g_call = -2;  // -2: not configured yet
static int g_trace = 0;
static long g_nth = 1, g_times = 1;
static int g_errno = EIO, g_hang = 0;
static double g_slow_s = 0;
static int g_rank = -1;
static char g_path[512] = ".h5.partial";
static long g_count = 0;

static void configure(void) {
  if (g_call != -2) return;
  const char* call = getenv("SHARDTRAIN_FAULT_CALL");
  int c = kNone;
  if (call) {
    if (!strcmp(call, "open")) c = kOpen;
    else if (!strcmp(call, "write")) c = kWrite;
    else if (!strcmp(call, "fsync")) c = kFsync;
    else if (!strcmp(call, "rename")) c = kRename;
    else if (!strcmp(call, "close")) c = kClose;
    else if (!strcmp(call, "read")) c = kRead;
    else {
      fprintf(stderr, "fault injector: unknown SHARDTRAIN_FAULT_CALL '%s'\n", call);
      abort();
    }
  }
  const char* want_rank = getenv("SHARDTRAIN_FAULT_RANK");
  const char* rank = getenv("OMPI_COMM_WORLD_RANK");
  if (!rank) rank = getenv("PMI_RANK");
  const int mine = rank ? atoi(rank) : 0;
  if (mine != (want_rank ? atoi(want_rank) : 0)) c = kNone;
  g_rank = mine;
  const char* path = getenv("SHARDTRAIN_FAULT_PATH");
  if (path) snprintf(g_path, sizeof g_path, "%s", path);
  const char* nth = getenv("SHARDTRAIN_FAULT_NTH");
  if (nth) g_nth = atol(nth);
  const char* times = getenv("SHARDTRAIN_FAULT_TIMES");
  if (times) g_times = atol(times);
  const char* err = getenv("SHARDTRAIN_FAULT_ERRNO");
  if (err) {
    if (!strcmp(err, "EIO")) g_errno = EIO;
    else if (!strcmp(err, "ENOSPC")) g_errno = ENOSPC;
    else if (!strcmp(err, "EDQUOT")) g_errno = EDQUOT;
    else if (!strcmp(err, "HANG")) g_hang = 1;
    else if (!strcmp(err, "SLOW")) {
      const char* slow = getenv("SHARDTRAIN_FAULT_SLOW_S");
      g_slow_s = slow ? atof(slow) : 5.0;
    }
    else g_errno = atoi(err);
  }
  const char* trace = getenv("SHARDTRAIN_FAULT_TRACE");
  g_trace = trace && trace[0] == '1';
  __atomic_store_n(&g_call, c, __ATOMIC_RELEASE);
}

static const char* call_name(int call) {
  static const char* names[] = {"open", "write", "fsync", "rename", "close", "read"};
  return call >= 0 && call < kNone ? names[call] : "?";
}

static const char* errno_name(int e) {
  return e == EIO ? "EIO" : e == ENOSPC ? "ENOSPC" : e == EDQUOT ? "EDQUOT" : "errno";
}

// Whether this call fails: 0 passes; 1 fails with g_errno (errno is set). Hangs for HANG.
static int inject(int call, const char* path, const char* path2) {
  configure();
  if (g_call != call || !path) return 0;
  if (!strstr(path, g_path) && !(path2 && strstr(path2, g_path))) return 0;
  const long n = __atomic_add_fetch(&g_count, 1, __ATOMIC_ACQ_REL);
  const int fail = n >= g_nth && (g_times == 0 || n < g_nth + g_times);
  char line[1200];
  if (g_trace || fail) {
    const int len = snprintf(line, sizeof line, "fault injector: rank %d: %s(%s%s%s)%s%s (matching call %ld)\n",
                             g_rank, call_name(call), path, path2 ? ", " : "", path2 ? path2 : "",
                             fail ? " -> " : "", fail ? (g_hang ? "HANG" : g_slow_s > 0 ? "SLOW" : errno_name(g_errno)) : "", n);
    static ssize_t (*real_write)(int, const void*, size_t) = NULL;
    if (!real_write) real_write = (ssize_t(*)(int, const void*, size_t))dlsym(RTLD_NEXT, "write");
    if (len > 0) real_write(2, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
  }
  if (!fail) return 0;
  if (g_hang)
    for (;;) pause();
  if (g_slow_s > 0) {
    struct timespec t = {(time_t)g_slow_s, (long)((g_slow_s - (double)(time_t)g_slow_s) * 1e9)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
    return 0;
  }
  errno = g_errno;
  return 1;
}

// The path an open descriptor names ("" when unknown).
static const char* fd_path(int fd, char* buf, size_t size) {
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, buf, size - 1);
  buf[n > 0 ? n : 0] = '\0';
  return buf;
}

static int fd_fails(int call, int fd) {
  configure();
  if (g_call != call) return 0;
  char buf[1024];
  return inject(call, fd_path(fd, buf, sizeof buf), NULL);
}

#define REAL(ret, name, ...)                                               \
  static ret (*real)(__VA_ARGS__) = NULL;                                  \
  if (!real) real = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, name)

// ------------------------------------------------------------------- open

#define OPEN_MODE                       \
  mode_t mode = 0;                      \
  if (flags & (O_CREAT | O_TMPFILE)) {  \
    va_list ap;                         \
    va_start(ap, flags);                \
    mode = (mode_t)va_arg(ap, int);     \
    va_end(ap);                         \
  }

int open(const char* path, int flags, ...) {
  OPEN_MODE
  REAL(int, "open", const char*, int, ...);
  if (inject(kOpen, path, NULL)) return -1;
  return real(path, flags, mode);
}
int open64(const char* path, int flags, ...) {
  OPEN_MODE
  REAL(int, "open64", const char*, int, ...);
  if (inject(kOpen, path, NULL)) return -1;
  return real(path, flags, mode);
}
int openat(int dirfd, const char* path, int flags, ...) {
  OPEN_MODE
  REAL(int, "openat", int, const char*, int, ...);
  if (inject(kOpen, path, NULL)) return -1;
  return real(dirfd, path, flags, mode);
}
int openat64(int dirfd, const char* path, int flags, ...) {
  OPEN_MODE
  REAL(int, "openat64", int, const char*, int, ...);
  if (inject(kOpen, path, NULL)) return -1;
  return real(dirfd, path, flags, mode);
}
int __open_2(const char* path, int flags) {
  REAL(int, "__open_2", const char*, int);
  if (inject(kOpen, path, NULL)) return -1;
  return real(path, flags);
}
int __open64_2(const char* path, int flags) {
  REAL(int, "__open64_2", const char*, int);
  if (inject(kOpen, path, NULL)) return -1;
  return real(path, flags);
}

// ------------------------------------------------------------------ write

ssize_t write(int fd, const void* buf, size_t n) {
  REAL(ssize_t, "write", int, const void*, size_t);
  if (fd > 2 && fd_fails(kWrite, fd)) return -1;
  return real(fd, buf, n);
}
ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  REAL(ssize_t, "pwrite", int, const void*, size_t, off_t);
  if (fd_fails(kWrite, fd)) return -1;
  return real(fd, buf, n, off);
}
ssize_t pwrite64(int fd, const void* buf, size_t n, off64_t off) {
  REAL(ssize_t, "pwrite64", int, const void*, size_t, off64_t);
  if (fd_fails(kWrite, fd)) return -1;
  return real(fd, buf, n, off);
}
ssize_t writev(int fd, const struct iovec* iov, int cnt) {
  REAL(ssize_t, "writev", int, const struct iovec*, int);
  if (fd > 2 && fd_fails(kWrite, fd)) return -1;
  return real(fd, iov, cnt);
}
ssize_t pwritev(int fd, const struct iovec* iov, int cnt, off_t off) {
  REAL(ssize_t, "pwritev", int, const struct iovec*, int, off_t);
  if (fd_fails(kWrite, fd)) return -1;
  return real(fd, iov, cnt, off);
}

// ------------------------------------------------------------------- read
// read and readv on descriptors 0-2 pass (the terminal, the launcher's pipes).

ssize_t read(int fd, void* buf, size_t n) {
  REAL(ssize_t, "read", int, void*, size_t);
  if (fd > 2 && fd_fails(kRead, fd)) return -1;
  return real(fd, buf, n);
}
ssize_t __read_chk(int fd, void* buf, size_t n, size_t buflen) {
  REAL(ssize_t, "__read_chk", int, void*, size_t, size_t);
  if (fd > 2 && fd_fails(kRead, fd)) return -1;
  return real(fd, buf, n, buflen);
}
ssize_t pread(int fd, void* buf, size_t n, off_t off) {
  REAL(ssize_t, "pread", int, void*, size_t, off_t);
  if (fd_fails(kRead, fd)) return -1;
  return real(fd, buf, n, off);
}
ssize_t pread64(int fd, void* buf, size_t n, off64_t off) {
  REAL(ssize_t, "pread64", int, void*, size_t, off64_t);
  if (fd_fails(kRead, fd)) return -1;
  return real(fd, buf, n, off);
}
ssize_t __pread_chk(int fd, void* buf, size_t n, off_t off, size_t buflen) {
  REAL(ssize_t, "__pread_chk", int, void*, size_t, off_t, size_t);
  if (fd_fails(kRead, fd)) return -1;
  return real(fd, buf, n, off, buflen);
}
ssize_t __pread64_chk(int fd, void* buf, size_t n, off64_t off, size_t buflen) {
  REAL(ssize_t, "__pread64_chk", int, void*, size_t, off64_t, size_t);
  if (fd_fails(kRead, fd)) return -1;
  return real(fd, buf, n, off, buflen);
}
ssize_t readv(int fd, const struct iovec* iov, int cnt) {
  REAL(ssize_t, "readv", int, const struct iovec*, int);
  if (fd > 2 && fd_fails(kRead, fd)) return -1;
  return real(fd, iov, cnt);
}
ssize_t preadv(int fd, const struct iovec* iov, int cnt, off_t off) {
  REAL(ssize_t, "preadv", int, const struct iovec*, int, off_t);
  if (fd_fails(kRead, fd)) return -1;
  return real(fd, iov, cnt, off);
}
ssize_t preadv64(int fd, const struct iovec* iov, int cnt, off64_t off) {
  REAL(ssize_t, "preadv64", int, const struct iovec*, int, off64_t);
  if (fd_fails(kRead, fd)) return -1;
  return real(fd, iov, cnt, off);
}

// ------------------------------------------------------------ fsync, close

int fsync(int fd) {
  REAL(int, "fsync", int);
  if (fd_fails(kFsync, fd)) return -1;
  return real(fd);
}
int fdatasync(int fd) {
  REAL(int, "fdatasync", int);
  if (fd_fails(kFsync, fd)) return -1;
  return real(fd);
}
int close(int fd) {
  REAL(int, "close", int);
  if (fd > 2 && fd_fails(kClose, fd)) {
    const int err = errno;
    real(fd);  // the descriptor is released, as close(2) does even when it reports an error
    errno = err;
    return -1;
  }
  return real(fd);
}

// ----------------------------------------------------------------- rename

int rename(const char* from, const char* to) {
  REAL(int, "rename", const char*, const char*);
  if (inject(kRename, from, to)) return -1;
  return real(from, to);
}
int renameat(int fromfd, const char* from, int tofd, const char* to) {
  REAL(int, "renameat", int, const char*, int, const char*);
  if (inject(kRename, from, to)) return -1;
  return real(fromfd, from, tofd, to);
}
int renameat2(int fromfd, const char* from, int tofd, const char* to, unsigned flags) {
  REAL(int, "renameat2", int, const char*, int, const char*, unsigned);
  if (inject(kRename, from, to)) return -1;
  return real(fromfd, from, tofd, to, flags);
}
