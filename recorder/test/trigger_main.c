/* iotape-trigger-check EXPR: feeds recorder/trigger.c the lines on stdin and
 * prints what it evaluates, for tests/recorder/test_trigger.py to check against
 * exact values computed apart.
 *   add QUEUE_NS COMPLETE_NS   a record (ns since the capture's start)
 *   eval NOW_NS                prints "VALUE HOLDS" (VALUE nan: no latency) */
#include <stdio.h>
#include <string.h>

#include "trigger.h"

int main(int argc, char **argv)
{
	struct trigger t;
	struct iotape_record r;
	char msg[256], cmd[8];
	unsigned long long a, b;

	if (argc != 2 || trig_parse(&t, argv[1], msg, sizeof(msg))) {
		fprintf(stderr, "%s\n", argc == 2 ? msg : "usage: iotape-trigger-check EXPR");
		return 2;
	}
	while (scanf("%7s %llu", cmd, &a) == 2) {
		if (!strcmp(cmd, "add") && scanf("%llu", &b) == 1) {
			memset(&r, 0, sizeof(r));
			r.ts_queue_ns = a;
			r.ts_complete_ns = b;
			trig_add(&t, &r);
		} else if (!strcmp(cmd, "eval")) {
			bool holds = trig_eval(&t, a);

			printf("%.17g %d\n", t.last, holds);
		}
	}
	trig_free(&t);
	return 0;
}
