"""ONNX node-suite cases luminal does not pass, each group with the reason.

Generated from a run of the whole node suite, then reviewed; tests/onnx/test_node_suite.py
checks that every listed case exists and still fails, so the list cannot go stale.
"""

from __future__ import annotations

# reason -> test names (without the _cpu device suffix)
EXCLUDED: dict[str, list[str]] = {
    (
        "BitCast of 64-bit types (float64/int64 compute as float32/int32, so their bit "
        "patterns are not held) and uint32 values beyond int32 (rejected on input)"
    ): [
        "test_bitcast_float64_to_int64",
        "test_bitcast_int64_to_float64",
        "test_bitcast_uint32_to_int32",
    ],
    (
        "float16 attention: luminal computes in float32 and rounds once; the reference "
        "rounds every step, two elements differ by one float16 ulp (> rtol 1e-3)"
    ): [
        "test_attention_4d_causal_fp16",
        "test_attention_4d_causal_fp16_expanded",
    ],
    ("ImageDecoder: decodes image files, out of scope"): [
        "test_image_decoder_decode_bmp_rgb",
        "test_image_decoder_decode_jpeg2k_rgb",
        "test_image_decoder_decode_jpeg_bgr",
        "test_image_decoder_decode_jpeg_grayscale",
        "test_image_decoder_decode_jpeg_rgb",
        "test_image_decoder_decode_png_rgb",
        "test_image_decoder_decode_pnm_rgb",
        "test_image_decoder_decode_tiff_rgb",
        "test_image_decoder_decode_webp_rgb",
    ],
    (
        "Bernoulli: the expected outputs are a draw from numpy's global generator made "
        "while the case was generated (np.random.binomial after the inputs were drawn), "
        "not a function of the node; ONNX's own ReferenceEvaluator, seeded from the "
        "node's seed attribute, fails these cases too (test_bernoulli_seed: 8 of its 10 "
        "values differ)"
    ): [
        "test_bernoulli",
        "test_bernoulli_double",
        "test_bernoulli_double_expanded",
        "test_bernoulli_expanded",
        "test_bernoulli_seed",
        "test_bernoulli_seed_expanded",
    ],
    (
        "the harness cannot compare this output: Runner.assert_similar_outputs recurses "
        "into a sequence and calls len() on its 0-d first element (TypeError); luminal's "
        "sequence equals the expected one element by element"
    ): [
        "test_loop16_seq_none",
    ],
    (
        "inverse DFT: the exact answer fails the case's own tolerance. The expected output "
        "is numpy's complex64 FFT (pocketfft's float32 butterflies for length 10), whose "
        "rounding leaves 1.9e-7 at 10 of the 200 elements where the exact value is 0 "
        "(float64: -7e-16); the suite's atol is 1e-7. luminal's DFT (float64 tables, "
        "rounded once) gives ~3e-15 there; only that FFT's operation order would pass"
    ): [
        "test_dft_inverse",
        "test_dft_inverse_opset19",
    ],
    ("string tensors: luminal computes on numbers only"): [
        "test_ai_onnx_ml_label_encoder_string_int",
        "test_ai_onnx_ml_label_encoder_string_int_no_default",
        "test_ai_onnx_ml_label_encoder_tensor_mapping",
        "test_ai_onnx_ml_label_encoder_tensor_value_only_mapping",
        "test_equal_string",
        "test_equal_string_broadcast",
        "test_regex_full_match_basic",
        "test_regex_full_match_email_domain",
        "test_regex_full_match_empty",
        "test_string_concat",
        "test_string_concat_broadcasting",
        "test_string_concat_empty_string",
        "test_string_concat_utf8",
        "test_string_concat_zero_dimensional",
        "test_string_split_basic",
        "test_string_split_consecutive_delimiters",
        "test_string_split_empty_string_delimiter",
        "test_string_split_empty_tensor",
        "test_string_split_maxsplit",
        "test_string_split_no_delimiter",
        "test_strnormalizer_export_monday_casesensintive_lower",
        "test_strnormalizer_export_monday_casesensintive_nochangecase",
        "test_strnormalizer_export_monday_casesensintive_upper",
        "test_strnormalizer_export_monday_empty_output",
        "test_strnormalizer_export_monday_insensintive_upper_twodim",
        "test_strnormalizer_nostopwords_nochangecase",
    ],
}
