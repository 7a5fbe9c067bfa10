/* SPDX-License-Identifier: MIT */
/*
 * listen.h: llgo-heapd's listening socket (listen.c): the one systemd passes, or one bound
 * at a path; and the readiness notification systemd waits for.
 */
#ifndef LLGO_AGENT_LISTEN_H
#define LLGO_AGENT_LISTEN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

/* systemd socket activation (sd_listen_fds(3) protocol): the listening descriptor passed to
 * this process (non-blocking, close-on-exec), -ENOENT when not activated, or -EINVAL with a
 * reason in err when what was passed is not an AF_UNIX SOCK_SEQPACKET listening socket. */
int listen_systemd_fd(char *err, size_t errlen);
/* Whether systemd passed this process a socket (true until listen_systemd_fd took it). */
bool listen_activated(void);

/* Create path's folders, replace a stale socket there (never a live one, nor another kind
 * of file), bind mode 0666 and listen. Returns the descriptor (non-blocking, close-on-exec)
 * and the socket file's identity in *st (to unlink it later only if it is still ours), or
 * -errno with a reason in err. Changes the umask for the bind: call before threads start. */
int listen_bind(const char *path, struct stat *st, char *err, size_t errlen);

/* Tell the service manager how we are (sd_notify(3) protocol: "READY=1", "RELOADING=1",
 * "STOPPING=1", "STATUS=..."): one datagram to $NOTIFY_SOCKET; nothing when it is unset. */
void listen_notify(const char *state);

#endif
