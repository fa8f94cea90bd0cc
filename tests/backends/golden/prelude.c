#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float lm_bf16_load(unsigned short v) {
    uint32_t bits = ((uint32_t)v) << 16; float f; memcpy(&f, &bits, 4); return f;
}
static inline unsigned short lm_bf16_store(float f) {
    uint32_t bits; memcpy(&bits, &f, 4);
    if (f != f) return (unsigned short)((bits >> 16) | 0x40);
    bits += 0x7fff + ((bits >> 16) & 1); return (unsigned short)(bits >> 16);
}
static inline float lm_fmod_floor(float a, float b) {
    float r = fmodf(a, b);
    return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
/* max propagating NaN, as two selects (one `||` of the two tests keeps gcc from
   vectorising: a 3x3 max pool ran 18x slower) */
static inline float lm_max_nan(float a, float b) {
    const float m = b > a ? b : a;
    return b != b ? b : m;
}
static inline int lm_max_int(int a, int b) { return b > a ? b : a; }
/* integer semantics are numpy's and never trap: x % 0 == 0 and INT_MIN % -1 == 0 (C's %
   raises SIGFPE for both); a divisor of 0 or -1 is replaced by 1, whose remainder is 0 too */
static inline int lm_imod_floor(int a, int b) {
    int r = a % ((b == 0) | (b == -1) ? 1 : b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
/* float -> int32 truncates; NaN, infinities and values outside int32 give INT_MIN (what
   numpy, PyTorch and the x86 instruction give; a plain C cast is undefined there) */
static inline int lm_float_to_int(float x) {
    return (x >= -2147483648.0f && x < 2147483648.0f) ? (int)x : (-2147483647 - 1);
}
/* int32 + and * wrap around as numpy's do (signed overflow is undefined in C) */
static inline int lm_iadd(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
static inline int lm_imul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
/* a failed malloc: the run's fault record gets {ALLOC_FAULT, bytes asked for} and the
   kernel returns without computing (called outside parallel regions) */
static inline void lm_fault_alloc(long long* f, long long bytes) {
    f[1] = bytes; f[2] = 0; f[0] = 2;
}
