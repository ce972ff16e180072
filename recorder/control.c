#include "control.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* PATH as a sockaddr: short enough as it is, or through an fd on its directory
 * (sun_path holds 108 bytes; the output's directory may be deeper). *DIRFD is
 * the fd to close afterwards, or -1. Returns 0 or -1. */
static int address(const char *path, struct sockaddr_un *sa, int *dirfd)
{
	const char *slash = strrchr(path, '/');
	char dir[4096];

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	*dirfd = -1;
	if (strlen(path) < sizeof(sa->sun_path)) {
		memcpy(sa->sun_path, path, strlen(path));
		return 0;
	}
	if (!slash || (size_t)(slash - path) >= sizeof(dir))
		return -1;
	memcpy(dir, path, slash - path);
	dir[slash - path] = 0;
	*dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (*dirfd < 0)
		return -1;
	if ((size_t)snprintf(sa->sun_path, sizeof(sa->sun_path), "/proc/self/fd/%d/%s", *dirfd,
			     slash + 1) >= sizeof(sa->sun_path)) {
		close(*dirfd);
		*dirfd = -1;
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

int ctl_listen(const char *path, char *msg, size_t size)
{
	struct sockaddr_un sa;
	int fd = -1, dirfd, err;

	if (address(path, &sa, &dirfd)) {
		snprintf(msg, size, "%s: cannot name the control socket: %s", path, strerror(errno));
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int probe;

		if (errno != EADDRINUSE)
			goto fail;
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		err = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) ? errno : 0;
		if (probe >= 0)
			close(probe);
		if (err != ECONNREFUSED) {
			snprintf(msg, size, "%s: another recorder is listening on it", path);
			goto out;
		}
		unlink(sa.sun_path);	/* left by a recorder that died */
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
			goto fail;
	}
	if (listen(fd, 8))
		goto fail;
	if (dirfd >= 0)
		close(dirfd);
	return fd;
fail:
	snprintf(msg, size, "%s: cannot make the control socket: %s", path, strerror(errno));
out:
	if (fd >= 0)
		close(fd);
	if (dirfd >= 0)
		close(dirfd);
	return -1;
}

int ctl_accept(int lfd, char *line, size_t size)
{
	struct timeval tv = { .tv_sec = 0, .tv_usec = 200000 };
	size_t n = 0;
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return -1;
	/* A client sends its line at once; one that does not is dropped, not waited on. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	while (n + 1 < size) {
		ssize_t got = read(fd, line + n, size - 1 - n);

		if (got <= 0)
			break;
		n += got;
		if (memchr(line, '\n', n))
			break;
	}
	line[n] = 0;
	line[strcspn(line, "\r\n")] = 0;
	if (!n) {
		close(fd);
		return -1;
	}
	return fd;
}

void ctl_reply(int fd, const char *json_line)
{
	size_t len = strlen(json_line);

	if (write(fd, json_line, len) != (ssize_t)len)
		(void)0;	/* a client that left: nothing to tell */
	close(fd);
}

void ctl_close(int lfd, const char *path)
{
	if (lfd < 0)
		return;
	close(lfd);
	unlink(path);
}
