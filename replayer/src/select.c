/* The exact percentiles' passes over a spill of values (replayer/run/quantiles.py,
 * build/libpostreplay.so, run/native.py).
 *
 * Each read of the spill narrows a rank to a bin: numpy counted the values below a
 * range, masked those inside it, took them, shifted and divided them and counted
 * the bins, six passes and three temporaries a read; here it is one pass. The
 * values of the bin found last are taken in one pass too. */
#include <stdint.h>

/* hist[(v - a) / width] += 1 for each value v in [a, b]; returns how many are below a. */
int64_t range_hist(const int64_t *x, int64_t n, int64_t a, int64_t b, int64_t width,
                   int64_t *hist) {
    int64_t below = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = x[i];
        if (v < a)
            below++;
        else if (v <= b)
            hist[(v - a) / width]++;
    }
    return below;
}

/* The values in [a, b], in their order, into out (room for n); returns how many. */
int64_t range_take(const int64_t *x, int64_t n, int64_t a, int64_t b, int64_t *out) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = x[i];
        if (v >= a && v <= b) out[k++] = v;
    }
    return k;
}
