/* A batch's task names (char[16], `comm`) coded for its dictionary column
 * (analyzer/store/event_batches.py loads this, in build/libingest.so).
 *
 * A trace has a handful of thread names: each row is compared, 16 bytes as two
 * 64-bit words, with each of the batch's names so far, numbered in order of
 * first sight, as Arrow's dictionary_encode numbers them. numpy took two compares and a masked store
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
    for (int64_t i = 0; i < n; i++) {
        uint64_t a, b;
        memcpy(&a, raw + 16 * i, 8);
        memcpy(&b, raw + 16 * i + 8, 8);
        /* Every name compared, no branch on which: rows of a few names in any
         * order (a database's threads) mispredicted a search that stops. */
        int32_t code = -1;
        for (int64_t j = 0; j < k; j++) code = (a == lo[j]) & (b == hi[j]) ? (int32_t)j : code;
        if (code < 0) {
            if (k == cap) return -1;
            lo[k] = a;
            hi[k] = b;
            memcpy(names + 16 * k, raw + 16 * i, 16);
            code = (int32_t)k++;
        }
        codes[i] = code;
    }
    return k;
}
