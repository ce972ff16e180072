/* A JSON string, written to stdout: shared by report.c (the run's report) and
 * deps.c (its "dependencies" key), so that neither includes the other's work. */
#include <stdio.h>

#include "lanes.h"

void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}
