/* The control socket of a rotated capture: OUT.ctl, a Unix stream socket beside
 * the output, through which `iotape record --snapshot -o OUT` (and --status)
 * reaches the recorder writing OUT. One request line in, one JSON line out.
 *
 * Why a socket and not a pid file and a signal: a pid file outlives a killed
 * recorder and its pid may be reused by another process, which a signal would
 * then hit; a socket nobody listens on refuses the connection (ECONNREFUSED), so
 * a stale one is told apart and replaced, and the recorder answers (the
 * snapshot's directory) where a signal cannot. */
#ifndef CONTROL_H
#define CONTROL_H

#include <stddef.h>

/* Listens on PATH (any length: bound through its directory's /proc/self/fd
 * entry). A socket left by a recorder that died is replaced; one that answers is
 * another capture. Returns the listening fd, or -1 with a one-line reason in MSG. */
int ctl_listen(const char *path, char *msg, size_t size);
/* A waiting request: its line (without the newline) in LINE; returns the
 * client's fd for ctl_reply, or -1 when none waits. Never blocks for long. */
int ctl_accept(int lfd, char *line, size_t size);
/* Answers the request and closes it. */
void ctl_reply(int fd, const char *json_line);
/* Stops listening and removes PATH. */
void ctl_close(int lfd, const char *path);

#endif /* CONTROL_H */
