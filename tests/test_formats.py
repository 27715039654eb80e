"""regen.formats against the OCP Microscaling Formats (MX) v1.0 tables and rules, and against
torch's own FP8 casts."""

import subprocess
import sys

import numpy as np
import pytest

from regen import formats as F


def test_e8m0_codes_are_powers_of_two_with_bias_127_and_255_is_nan():
    got = F.e8m0_decode([127, 128, 126, 0, 254, 255])
    assert list(got[:5]) == [1.0, 2.0, 0.5, 2.0 ** -127, 2.0 ** 127]
    assert np.isnan(got[5])
    assert list(F.e8m0_encode_exponent([0, -3, -200, 500])) == [127, 124, 0, 254]


def test_fp4_e2m1_code_table_matches_the_ocp_table():
    want = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    got = F.decode(np.arange(16), F.E2M1)
    assert list(got[:8]) == want
    assert list(got[8:]) == [-v for v in want]
    assert np.signbit(got[8])  # code 0b1000 is -0


@pytest.mark.parametrize("el, largest, smallest_subnormal, emax", [
    (F.E4M3, 448.0, 2.0 ** -9, 8),
    (F.E5M2, 57344.0, 2.0 ** -16, 15),
    (F.E2M3, 7.5, 0.125, 2),
    (F.E3M2, 28.0, 0.0625, 4),
    (F.E2M1, 6.0, 0.5, 2),
])
def test_element_types_have_the_ocp_extremes(el, largest, smallest_subnormal, emax):
    assert el.max == largest
    assert F.decode([1], el)[0] == smallest_subnormal
    assert el.emax == emax


def test_special_codes_e4m3_has_one_nan_and_no_inf_e5m2_is_ieee_like():
    e4 = F.decode(np.arange(256), F.E4M3)
    assert [c for c in range(256) if np.isnan(e4[c])] == [0x7F, 0xFF]
    assert not np.isinf(e4).any()
    e5 = F.decode(np.arange(256), F.E5M2)
    assert e5[0x7C] == np.inf and e5[0xFC] == -np.inf
    assert [c for c in range(128) if np.isnan(e5[c])] == [0x7D, 0x7E, 0x7F]
    for el in (F.E2M3, F.E3M2, F.E2M1):
        assert np.isfinite(F.decode(np.arange(1 << el.bits), el)).all()


def test_rounding_is_to_nearest_with_ties_to_even_codes():
    got = F.round_to([2.5, 3.5, 5.0, 0.25, 0.75, 1.2, -2.6], F.E2M1)
    assert list(got) == [2.0, 4.0, 4.0, 0.0, 1.0, 1.0, -3.0]


def test_conversion_saturates_by_default_and_overflows_when_asked_not_to():
    assert F.round_to([1000.0, -1e9, np.inf], F.E2M1).tolist() == [6.0, -6.0, 6.0]
    assert F.encode([-1e9], F.E4M3)[0] == 0xFE  # -448
    assert F.encode([500.0], F.E4M3, saturate=False)[0] == 0x7F  # NaN: e4m3fn has no inf
    assert F.encode([1e6], F.E5M2, saturate=False)[0] == 0x7C  # +inf
    assert F.encode([460.0], F.E4M3, saturate=False)[0] == 0x7E  # rounds down to 448: no overflow


def test_nan_becomes_the_nan_code_or_is_refused_where_there_is_none():
    assert F.encode([np.nan], F.E4M3)[0] == 0x7F
    assert np.isnan(F.decode(F.encode([np.nan], F.E5M2), F.E5M2)[0])
    with pytest.raises(ValueError, match="e2m1 has no NaN"):
        F.encode([np.nan], F.E2M1)


def test_fp8_codes_agree_with_torch_casts_bit_for_bit():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    for dtype, el in (("float8_e4m3fn", F.E4M3), ("float8_e5m2", F.E5M2)):
        x = torch.randn(20000, generator=g, dtype=torch.float64) * \
            torch.logspace(-8, np.log10(el.max) - 0.05, 20000, dtype=torch.float64)
        x = x.clamp(-el.max, el.max)  # in range: torch saturates e4m3fn but not e5m2 overflow
        want = x.to(getattr(torch, dtype)).view(torch.uint8).numpy()
        assert (F.encode(x.numpy(), el, saturate=False) == want).all(), dtype


def test_mx_block_scale_is_floor_log2_amax_minus_emax():
    x = np.full((1, 32), 1.0)
    x[0, 5] = -3.0  # amax 3: floor(log2 3) = 1, emax(e2m1) = 2 -> 2^-1
    codes, scales = F.quantize_mx(x, "mxfp4")
    assert scales.tolist() == [[126]]
    assert F.decode(codes[0, :2], F.E2M1).tolist() == [2.0, 2.0]
    assert F.dequantize_mx(codes, scales, "mxfp4")[0, 5] == -3.0


def test_mx_round_trip_is_exact_for_representable_blocks_and_bounded_otherwise():
    rng = np.random.default_rng(1)
    for name, f in F.MX_FORMATS.items():
        scales = rng.integers(100, 150, size=(3, 2))
        # codes that keep the block's largest magnitude at the top binade of the element type
        codes = rng.integers(0, 1 << f.element.bits, size=(3, 64)).astype(np.uint8)
        codes[:, ::32] = F.encode(f.element.max, f.element)
        if f.element.nan != "none":  # keep finite codes only
            vals = F.decode(codes, f.element)
            codes = np.where(np.isfinite(vals), codes, F.encode(1.0, f.element))
        x = F.dequantize_mx(codes, scales, name)
        c2, s2 = F.quantize_mx(x, name)
        assert (F.dequantize_mx(c2, s2, name) == x).all(), name
        y = rng.standard_normal((4, 128))
        err = np.abs(F.from_mx(*F.to_mx(y, name), name) - y)
        amax = np.abs(y).reshape(4, 4, 32).max(-1).repeat(32, -1)
        # a half ulp of the top binade, the worst a saturating OCP scale gives
        assert (err <= amax * 2.0 ** -f.element.mbits + 1e-300).all(), name


def test_mx_zero_block_gets_the_smallest_scale_and_a_nan_block_the_nan_scale():
    x = np.zeros((2, 32))
    x[1, 3] = np.nan
    codes, scales = F.quantize_mx(x, "mxfp8_e4m3")
    assert scales.tolist() == [[0], [255]]
    out = F.dequantize_mx(codes, scales, "mxfp8_e4m3")
    assert (out[0] == 0).all() and np.isnan(out[1]).all()


def test_mx_refuses_a_last_dimension_that_is_not_whole_blocks():
    with pytest.raises(ValueError, match="not a multiple of the MX block"):
        F.quantize_mx(np.zeros((2, 48)), "mxfp4")


def test_packing_order_fp4_low_nibble_first_fp6_little_endian_bit_stream():
    assert F.pack(np.array([1, 2, 15, 0], np.uint8), "mxfp4").tolist() == [0x21, 0x0F]
    assert F.pack(np.array([1, 2, 3, 4], np.uint8), "mxfp6_e2m3").tolist() == [0x81, 0x30, 0x10]
    rng = np.random.default_rng(2)
    for name, f in F.MX_FORMATS.items():
        codes = rng.integers(0, 1 << f.element.bits, size=(5, 64)).astype(np.uint8)
        packed = F.pack(codes, name)
        assert packed.shape == (5, 64 * f.element.bits // 8)
        assert (F.unpack(packed, name) == codes).all()


def test_storage_shapes_per_format():
    assert F.storage("mxfp4", "K") == {"data": "K * 4 // 8", "scale": "K // 32"}
    assert F.storage("mxfp8_e5m2", "K") == {"data": "K", "scale": "K // 32"}
    assert F.storage("mxfp6_e3m2", "2 * K") == {"data": "(2 * K) * 6 // 8",
                                                 "scale": "(2 * K) // 32"}
    assert F.storage("mxfp6_e2m3", 64) == {"data": 48, "scale": 2}
    with pytest.raises(ValueError, match="unknown format 'mxfp3'"):
        F.storage("mxfp3", "K")


def test_importing_formats_does_not_import_torch():
    code = "import sys, regen.formats; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("el", list(F.ELEMENTS.values()), ids=lambda e: e.name)
def test_encode_is_the_nearest_code_with_ties_to_the_even_one(el):
    """Against a brute-force search over the code table, on random values, on every exact
    midpoint between neighbouring values (the ties) and beyond the largest."""
    vals = F.decode(np.arange(1 << (el.bits - 1)), el)
    codes = np.arange(len(vals))[np.isfinite(vals)]
    pos = vals[codes]
    mids = (pos[:-1] + pos[1:]) / 2
    rng = np.random.default_rng(3)
    x = np.concatenate([mids, pos, rng.uniform(0, el.max * 1.5, 5000),
                        np.exp2(rng.uniform(-20, 1, 2000)) * el.max])
    x = np.concatenate([x, -x])
    dist = np.abs(np.abs(x)[:, None] - pos[None, :])
    best = dist.min(axis=1, keepdims=True)
    tied = dist == best
    # the even code among the nearest (the smaller one if both are odd cannot happen: neighbours)
    pick = np.where(tied & (codes[None, :] % 2 == 0), codes[None, :], 10**6).min(axis=1)
    pick = np.where(pick == 10**6, np.where(tied, codes[None, :], 10**6).min(axis=1), pick)
    pick = np.where(np.abs(x) >= el.max, codes[pos.argmax()], pick)  # saturation
    want = pick | np.where(np.signbit(x), 1 << (el.bits - 1), 0)
    assert (F.encode(x, el) == want).all()
