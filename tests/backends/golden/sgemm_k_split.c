/* golden source of tests/backends/golden_cases.py::sgemm_k_split; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [4] */
void lm_sgemm(int, int, long long, long long, long long, const float*, long long, const float*, long long, float*, long long, long long, long long);
long long lm_sgemm_gather(int, long long, long long, long long, const float*, long long, const float*, const long long*, float*, long long, long long, long long);
/* sgemm */
void lm_sgemm_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const long long* restrict d) {
    lm_sgemm(111, 111, 6, 5, 8192, b1 + 0, 8192, b2 + 0, 5, b0 + 0, 5, 5, 0);
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_sgemm_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_sgemm_<hash>(b[2], b[0], b[1], d); }
    return 0;
}
