/* The forwarder inside a sandbox (evalkit/calls/sandbox.py), in C: the same job as
 * _forwarder.py, without an interpreter's start-up on every sample (about 8-10 ms of the
 * sandbox's added start-up on a 2-core machine; bwrap's own namespaces and mounts cost
 * about 3-4 ms). Compiled by `make install` (`make sandbox`) into the virtualenv
 * (evalkit.calls.sandbox.FORWARDER_BIN); where it is absent or older than this file,
 * evalkit runs _forwarder.py instead.
 *
 *   evalkit-forwarder [OPTION...] PORT SOCKET -- ARGV...
 *
 * Options, applied before anything else (no extra process to start for them): --nproc=N,
 * --data=N, --fsize=N, --nofile=N set that resource limit (soft and hard) as prlimit(1)
 * does; --uid=N (root's sandbox) drops the bounding set, every group and root for uid
 * and gid N as setpriv(1) does; --max-connections=N: see below.
 *
 * With N, at most N connections are copied at once: one more is closed as it is
 * accepted, and the first time, a line on the program's stderr names the limit
 * (`limits.proxy_connections`: evalkit errors the sample that hits it).
 * Listens on 127.0.0.1:PORT (the sandbox has its own network namespace: nothing else is
 * reachable) BEFORE the program starts, so the program's first connect never fails (the
 * kernel queues it in the backlog until it is accepted); forks and execs ARGV in the
 * child (which inherits stdin, stdout and stderr); lets go of those three itself; a
 * server process accepts each connection and a process of its own copies it to and from
 * SOCKET (the proxy's Unix socket) until either side is done; exits with the program's
 * status (128 + N for a signal N, as a shell reports it). When it exits, bubblewrap's
 * PID 1 exits and the kernel kills the rest of the sandbox (the server included).
 *
 * Written by hand because no library or packaged tool does this byte copy here: socat
 * or similar tools are not on every target machine (and start no faster), and the point
 * of this file is to cost no start-up. POSIX and Linux calls only, no dependencies.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Send all of buf on fd; 0 when done, -1 when the peer is gone. */
static int send_all(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Copy both ways between a and b until both directions are done; a direction is done at
 * its reader's end of file or error, and then the other side's write half is shut. */
static void pump(int a, int b) {
    static char buf[65536];
    int open_ab = 1, open_ba = 1;
    while (open_ab || open_ba) {
        /* a finished direction's fd is left out (-1): its POLLHUP would wake poll at once, forever */
        struct pollfd p[2] = {{open_ab ? a : -1, POLLIN, 0}, {open_ba ? b : -1, POLLIN, 0}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        for (int i = 0; i < 2; i++) {
            int *open = i == 0 ? &open_ab : &open_ba;
            int src = i == 0 ? a : b, dst = i == 0 ? b : a;
            if (!*open || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t r = recv(src, buf, sizeof buf, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0 || send_all(dst, buf, (size_t)r) < 0) {
                *open = 0;
                shutdown(dst, SHUT_WR);
            }
        }
    }
}

/* A short pause before accepting again after running out of a resource (descriptors,
 * memory, processes): those come back as connections end; retrying at once would spin. */
static void back_off(void) {
    struct timespec pause = {0, 10 * 1000 * 1000}; /* 10 ms */
    while (nanosleep(&pause, &pause) < 0 && errno == EINTR) {
    }
}

/* Accept connections on the listener; each is served by a process of its own. Only a
 * listener that is no longer one (EBADF, EINVAL, ENOTSOCK) ends the server: accept(2) on
 * Linux passes on pending network errors of the new connection (ENETDOWN, EPROTO, ...),
 * to be retried, and EMFILE, ENFILE, ENOBUFS and ENOMEM pass. */
static void serve(int listener, const char *path, int max_conns, int report) {
    int live = 0, said = 0;
    struct sockaddr_un up_addr;
    memset(&up_addr, 0, sizeof up_addr);
    up_addr.sun_family = AF_UNIX;
    strncpy(up_addr.sun_path, path, sizeof up_addr.sun_path - 1);
    if (max_conns <= 0) signal(SIGCHLD, SIG_IGN); /* the connection processes reap themselves */
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        int conn = accept(listener, NULL, NULL);
        if (conn < 0) {
            if (errno == EBADF || errno == EINVAL || errno == ENOTSOCK) _exit(1);
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) back_off();
            continue;
        }
        while (max_conns > 0 && waitpid(-1, NULL, WNOHANG) > 0) live--; /* the connections that ended */
        if (max_conns > 0 && live >= max_conns) {
            close(conn);
            if (!said && report >= 0)
                dprintf(report, "evalkit sandbox: it hit a per-sample limit: limits.proxy_connections = %d\n", max_conns);
            said = 1;
            continue;
        }
        pid_t pid = fork();
        if (pid == 0) {
            close(listener);
            int one = 1;
            setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            int up = socket(AF_UNIX, SOCK_STREAM, 0);
            if (up >= 0 && connect(up, (struct sockaddr *)&up_addr, sizeof up_addr) == 0) pump(conn, up);
            _exit(0);
        }
        close(conn); /* a failed fork drops this connection (its client sees it closed) */
        if (pid < 0) back_off();
        if (pid > 0) live++;
    }
}

/* One resource limit, soft and hard: 0 when set. */
static int set_limit(int resource, const char *value) {
    struct rlimit r;
    r.rlim_cur = r.rlim_max = (rlim_t)strtoull(value, NULL, 10);
    return setrlimit(resource, &r);
}

/* Root's sandbox: no capability left to gain, no group, uid and gid `id`: 0 when done. */
static int drop_to(int id) {
    for (int cap = 0; cap < 64; cap++) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0); /* EINVAL past the last */
    return setgroups(0, NULL) || setresgid((gid_t)id, (gid_t)id, (gid_t)id) || setresuid((uid_t)id, (uid_t)id, (uid_t)id);
}

/* The options before PORT (see the top of this file): how many argv entries they take,
 * -1 for a bad one or one that could not be applied (said on stderr). */
static int apply_options(int argc, char **argv, int *max_conns) {
    static const struct { const char *name; int resource; } limits[] = {
        {"--nproc=", RLIMIT_NPROC}, {"--data=", RLIMIT_DATA}, {"--fsize=", RLIMIT_FSIZE}, {"--nofile=", RLIMIT_NOFILE}};
    int i = 1, uid = -1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0 && strcmp(argv[i], "--") != 0; i++) {
        const char *a = argv[i];
        int done = 0;
        for (size_t k = 0; k < sizeof limits / sizeof limits[0]; k++) {
            size_t n = strlen(limits[k].name);
            if (strncmp(a, limits[k].name, n) == 0) {
                if (set_limit(limits[k].resource, a + n) != 0) {
                    fprintf(stderr, "evalkit sandbox: could not set %s: %s\n", a, strerror(errno));
                    return -1;
                }
                done = 1;
            }
        }
        if (strncmp(a, "--max-connections=", 18) == 0) *max_conns = atoi(a + 18), done = 1;
        if (strncmp(a, "--uid=", 6) == 0) uid = atoi(a + 6), done = 1;
        if (!done) return -1;
    }
    if (uid >= 0 && drop_to(uid) != 0) {
        fprintf(stderr, "evalkit sandbox: could not drop to uid %d: %s\n", uid, strerror(errno));
        return -1;
    }
    return i - 1;
}

int main(int argc, char **argv) {
    int max_conns = 0;
    int taken = apply_options(argc, argv, &max_conns);
    if (taken < 0) return 2;
    argv += taken;
    argc -= taken;
    if (argc < 5 || strcmp(argv[3], "--") != 0) {
        fputs("usage: evalkit-forwarder [OPTION...] PORT SOCKET -- ARGV...\n", stderr);
        return 2;
    }
    int port = atoi(argv[1]);
    const char *path = argv[2];
    if (port <= 0 || port > 65535 || strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        fputs("evalkit-forwarder: bad PORT or SOCKET\n", stderr);
        return 2;
    }
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (listener < 0 || setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(listener, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(listener, 128) < 0) {
        fprintf(stderr, "evalkit sandbox: could not listen on 127.0.0.1:%d: %s\n", port, strerror(errno));
        return 1;
    }
    pid_t program = fork();
    if (program < 0) {
        fprintf(stderr, "evalkit sandbox: could not fork: %s\n", strerror(errno));
        return 1;
    }
    if (program == 0) { /* the listener is close-on-exec: the program never holds it */
        /* the program starts with no signal ignored or blocked, whatever bubblewrap's parent
         * left (an ignored disposition and the blocked mask survive execvp), as under the
         * python forwarder */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (int sig = 1; sig < NSIG; sig++) {
            if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL); /* EINVAL for the C library's own: kept */
        }
        execvp(argv[4], argv + 4);
        fprintf(stderr, "evalkit sandbox: could not start '%s': %s\n", argv[4], strerror(errno));
        _exit(127);
    }
    pid_t server = fork();
    if (server < 0) { /* reported while stderr is still the sample's; the sandbox ends with it */
        fprintf(stderr, "evalkit sandbox: could not start the proxy's forwarder: %s\n", strerror(errno));
        kill(program, SIGKILL);
        while (waitpid(program, NULL, 0) < 0 && errno == EINTR) {
        }
        return 1;
    }
    int report = fcntl(2, F_DUPFD_CLOEXEC, 3); /* the server's way to name a limit hit */
    int null = open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; fd++) dup2(null, fd); /* the program's pipes are its own: their end is its exit */
    if (null > 2) close(null);
    if (server == 0) serve(listener, path, max_conns, report);
    close(listener);
    if (report >= 0) close(report);
    int status;
    while (waitpid(program, &status, 0) < 0) {
        if (errno != EINTR) return 1;
    }
    if (server > 0) kill(server, SIGKILL);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}
