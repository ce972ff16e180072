/* A batch's task names (char[16], `comm`) coded for its dictionary column
 * (analyzer/store/event_batches.py loads this, in build/libingest.so).
 *
 * A trace has a handful of thread names, often long runs of one: each row is
 * compared, 16 bytes as two 64-bit words, with the name of the row before and
 * then with the batch's names so far, in order of first sight, as Arrow's
 * dictionary_encode numbers them. numpy took two compares and a masked store
 * over the whole batch per name (~1.5 ms a batch of 65,536 rows of four
 * names); this is one pass. Past `cap` names the caller hashes instead. */
#include <stdint.h>
#include <string.h>

/* codes[i]: the index of row i's name among `names` (out: cap * 16 bytes, each
 * name's bytes). Returns the count of names, -1 past cap. */
int64_t iot_names_code(int64_t n, const uint8_t *raw, int32_t *codes, uint8_t *names,
                       int64_t cap) {
    uint64_t lo[64], hi[64];
    if (cap > 64) cap = 64;
    int64_t k = 0;
    int32_t prev = -1;
    for (int64_t i = 0; i < n; i++) {
        uint64_t a, b;
        memcpy(&a, raw + 16 * i, 8);
        memcpy(&b, raw + 16 * i + 8, 8);
        if (prev >= 0 && a == lo[prev] && b == hi[prev]) {
            codes[i] = prev;
            continue;
        }
        int64_t j = 0;
        while (j < k && (a != lo[j] || b != hi[j])) j++;
        if (j == k) {
            if (k == cap) return -1;
            lo[k] = a;
            hi[k] = b;
            memcpy(names + 16 * k, raw + 16 * i, 16);
            k++;
        }
        prev = (int32_t)j;
        codes[i] = prev;
    }
    return k;
}
