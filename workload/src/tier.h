/* --ioengine tiered: a hybrid device below the database files. Each unit
 * (--tier-unit-kb, 4 MiB as an MSA page) of a database lives on the slow device
 * (the database's own file or device) or, once promoted, on the fast target
 * (--tier-fast) in one of its k slots. The placement is tierpolicy.c's, the
 * offline simulator's arithmetic; the copies are real I/O by one migration
 * thread (ese-migrate). Log I/O passes through untouched. */
#ifndef ESE_TIER_H
#define ESE_TIER_H

#include <stdint.h>
#include <stdio.h>
#include <sys/uio.h>

struct config;
/* --ioengine tiered's options, whole (dies with a one-line error), before any file is made. */
void tier_check_options(const struct config *c);
/* After the databases are open, before any worker's I/O. */
void tier_start(void);
/* After every worker has stopped: ends the migration thread, logs the end
 * state, copies every promoted unit back to the slow device. */
void tier_stop(void);
/* A request on fd, split at unit boundaries and served from wherever each unit
 * is: bytes done or -errno. */
int64_t tier_rw(int fd, int write, const struct iovec *iov, int iovcnt, uint64_t off);
struct iostat;
/* Database db's migration stream: the copies' reads and writes, each timed. */
void tier_db_stats(int db, struct iostat *out);
/* The result's "tier" object ("null" when the engine is not tiered). */
void tier_report(FILE *f);

#endif
