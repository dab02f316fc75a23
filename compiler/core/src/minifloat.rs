//! The floats narrower than 16 bits of ONNX and MLIR: the 8-bit E4M3FN,
//! E4M3FNUZ, E5M2 and E5M2FNUZ (opset 19) and the 4-bit E2M1FN (opset 23).
//! ircc holds their values as `f64`, so what it needs is rounding to the
//! format (nearest, ties to even, saturating or not, as ONNX's Cast does)
//! and the bit patterns they are stored and printed as.

use crate::types::ElemType;

/// How a format spends its special bit patterns.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Specials {
    /// IEEE-like (E5M2): the top exponent holds infinities and NaNs.
    Ieee,
    /// Finite (E4M3FN): only the all-ones exponent and mantissa is NaN.
    Finite,
    /// Finite, unsigned zero (FNUZ): 0x80 is NaN, there is no -0.
    FiniteUnsignedZero,
    /// Every pattern a finite number (E2M1FN): no NaN, no infinity.
    None,
}

/// A narrow float format: 1 sign bit, `exponent` bits with `bias`, and
/// `mantissa` bits.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct MiniFloat {
    exponent: i32,
    mantissa: i32,
    bias: i32,
    specials: Specials,
}

impl MiniFloat {
    /// The format of `elem`, if it is a float narrower than 16 bits.
    pub fn of(elem: ElemType) -> Option<MiniFloat> {
        let (exponent, mantissa, bias, specials) = match elem {
            ElemType::F4E2M1FN => (2, 1, 1, Specials::None),
            ElemType::F8E4M3FN => (4, 3, 7, Specials::Finite),
            ElemType::F8E4M3FNUZ => (4, 3, 8, Specials::FiniteUnsignedZero),
            ElemType::F8E5M2 => (5, 2, 15, Specials::Ieee),
            ElemType::F8E5M2FNUZ => (5, 2, 16, Specials::FiniteUnsignedZero),
            _ => return None,
        };
        Some(MiniFloat {
            exponent,
            mantissa,
            bias,
            specials,
        })
    }

    fn top_exponent(self) -> i32 {
        (1 << self.exponent) - 1
    }

    /// The least normal exponent.
    fn min_exponent(self) -> i32 {
        1 - self.bias
    }

    /// The largest finite value.
    pub fn max(self) -> f64 {
        let steps = f64::from(1 << self.mantissa);
        let (exponent, mantissa) = match self.specials {
            Specials::Ieee => (self.top_exponent() - 1, steps - 1.0),
            Specials::Finite => (self.top_exponent(), steps - 2.0),
            Specials::FiniteUnsignedZero | Specials::None => (self.top_exponent(), steps - 1.0),
        };
        (1.0 + mantissa / steps) * 2f64.powi(exponent - self.bias)
    }

    /// The exponents of its binades, least (normal; the subnormals share
    /// its spacing) to greatest, and its mantissa bits: the spacing of the
    /// values in binade e is 2^(e - mantissa).
    pub fn binades(self) -> (i32, i32, i32) {
        (
            self.min_exponent(),
            binary_exponent(self.max()),
            self.mantissa,
        )
    }

    /// Whether the format has no -0 (the FNUZ formats).
    pub fn unsigned_zero(self) -> bool {
        self.specials == Specials::FiniteUnsignedZero
    }

    /// Whether the format holds NaN (all but E2M1 do).
    pub fn has_nan(self) -> bool {
        self.specials != Specials::None
    }

    /// Whether the format holds infinities (E5M2 does).
    pub fn has_infinity(self) -> bool {
        self.specials == Specials::Ieee
    }

    /// The value the format holds nearest `x`: finite values past the
    /// largest saturate, infinities stay where the format has them.
    pub fn nearest(self, x: f64) -> f64 {
        if x.is_infinite() && self.has_infinity() {
            x
        } else {
            self.round(x, true)
        }
    }

    /// Where values start to overflow: past the bound, or at it too when
    /// the largest value's mantissa is odd (a tie then rounds up, to even).
    pub fn overflow_bound(self) -> (f64, bool) {
        let max = self.max();
        let ulp = 2f64.powi(binary_exponent(max) - self.mantissa);
        let odd = self.specials != Specials::Finite;
        (max + ulp / 2.0, odd)
    }

    /// What a value too large for the format becomes without saturation:
    /// a format with neither infinity nor NaN saturates regardless.
    fn overflow(self, negative: bool) -> f64 {
        match self.specials {
            Specials::Ieee if negative => f64::NEG_INFINITY,
            Specials::Ieee => f64::INFINITY,
            Specials::None if negative => -self.max(),
            Specials::None => self.max(),
            _ => f64::NAN,
        }
    }

    /// The width of a value in bits.
    fn bits(self) -> i32 {
        1 + self.exponent + self.mantissa
    }

    fn sign_bit(self) -> u8 {
        1 << (self.bits() - 1)
    }

    /// `x` rounded to the format, ties to even; a value past the largest
    /// (infinities included) becomes the largest when saturating, else
    /// infinity (E5M2) or NaN.
    pub fn round(self, x: f64, saturate: bool) -> f64 {
        if x.is_nan() {
            // E2M1 has no NaN: ml_dtypes (which ONNX's tests use) gives a
            // zero of the opposite sign.
            return match self.specials {
                Specials::None if x.is_sign_negative() => 0.0,
                Specials::None => -0.0,
                _ => f64::NAN,
            };
        }
        let negative = x.is_sign_negative();
        let signed = |v: f64| {
            if v == 0.0 && self.specials == Specials::FiniteUnsignedZero {
                0.0
            } else if negative {
                -v
            } else {
                v
            }
        };
        let a = x.abs();
        if a.is_infinite() {
            return if saturate {
                signed(self.max())
            } else {
                self.overflow(negative)
            };
        }
        if a == 0.0 {
            return signed(0.0);
        }
        let step = 2f64.powi(binary_exponent(a).max(self.min_exponent()) - self.mantissa);
        let v = (a / step).round_ties_even() * step;
        if v > self.max() {
            return if saturate {
                signed(self.max())
            } else {
                self.overflow(negative)
            };
        }
        signed(v)
    }

    /// The bit pattern of a value of the format (one `round` returns), in
    /// the low bits of a byte.
    pub fn to_bits(self, x: f64) -> u8 {
        let sign_bit = self.sign_bit();
        if x.is_nan() {
            return match self.specials {
                Specials::FiniteUnsignedZero => sign_bit,
                // E2M1 holds no NaN; `round` never gives one.
                Specials::None => 0,
                _ => sign_bit - 1,
            };
        }
        let a = x.abs();
        // The unsigned-zero formats' 0x80 is NaN, not -0.
        let unsigned_zero = a == 0.0 && self.specials == Specials::FiniteUnsignedZero;
        let sign = if x.is_sign_negative() && !unsigned_zero {
            sign_bit
        } else {
            0
        };
        if a.is_infinite() {
            return sign | (self.top_exponent() << self.mantissa) as u8;
        }
        let steps = f64::from(1 << self.mantissa);
        let (exponent, mantissa) = if a < 2f64.powi(self.min_exponent()) {
            (0, a / 2f64.powi(self.min_exponent()) * steps)
        } else {
            let e = binary_exponent(a);
            (e + self.bias, (a / 2f64.powi(e) - 1.0) * steps)
        };
        sign | ((exponent << self.mantissa) as u8) | (mantissa as u8)
    }

    /// The value of a bit pattern (in the low bits of a byte; the bits
    /// above the format's are ignored).
    pub fn from_bits(self, bits: u8) -> f64 {
        let sign_bit = self.sign_bit();
        let bits = bits & (sign_bit | (sign_bit - 1));
        if self.specials == Specials::FiniteUnsignedZero && bits == sign_bit {
            return f64::NAN;
        }
        let negative = bits & sign_bit != 0;
        let exponent = i32::from(bits & (sign_bit - 1)) >> self.mantissa;
        let mantissa = i32::from(bits) & ((1 << self.mantissa) - 1);
        let all_ones = (1 << self.mantissa) - 1;
        let special = match self.specials {
            Specials::Ieee if exponent == self.top_exponent() => Some(if mantissa == 0 {
                f64::INFINITY
            } else {
                f64::NAN
            }),
            Specials::Finite if exponent == self.top_exponent() && mantissa == all_ones => {
                Some(f64::NAN)
            }
            _ => None,
        };
        let steps = f64::from(1 << self.mantissa);
        let v = special.unwrap_or_else(|| {
            if exponent == 0 {
                f64::from(mantissa) / steps * 2f64.powi(self.min_exponent())
            } else {
                (1.0 + f64::from(mantissa) / steps) * 2f64.powi(exponent - self.bias)
            }
        });
        if negative { -v } else { v }
    }
}

/// floor(log2(a)) for a finite positive `a`, exactly.
fn binary_exponent(a: f64) -> i32 {
    let mut e = a.log2().floor() as i32;
    if 2f64.powi(e) > a {
        e -= 1;
    } else if 2f64.powi(e + 1) <= a {
        e += 1;
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [ElemType; 5] = [
        ElemType::F8E4M3FN,
        ElemType::F8E4M3FNUZ,
        ElemType::F8E5M2,
        ElemType::F8E5M2FNUZ,
        ElemType::F4E2M1FN,
    ];

    #[test]
    fn the_largest_values_are_the_specifications() {
        let max: Vec<f64> = ALL
            .iter()
            .map(|&e| MiniFloat::of(e).unwrap().max())
            .collect();
        assert_eq!(max, [448.0, 240.0, 57344.0, 57344.0, 6.0]);
    }

    #[test]
    fn every_bit_pattern_reads_back_through_rounding() {
        for e in ALL {
            let f = MiniFloat::of(e).unwrap();
            for bits in 0..=((1u16 << f.bits()) - 1) as u8 {
                let v = f.from_bits(bits);
                if v.is_nan() {
                    continue;
                }
                assert_eq!(f.round(v, false).to_bits(), v.to_bits(), "{e} {bits:#04x}");
                let back = f.to_bits(v);
                // -0 of the unsigned-zero formats has no pattern but 0.
                assert_eq!(f.from_bits(back).to_bits(), v.to_bits(), "{e} {bits:#04x}");
            }
        }
    }

    #[test]
    fn rounding_ties_to_even_and_overflows_as_onnx_casts() {
        let e4m3 = MiniFloat::of(ElemType::F8E4M3FN).unwrap();
        // 448 and 480 (no such value) differ by 32: 464 ties to 448, whose
        // mantissa is even; above it overflows.
        assert_eq!(e4m3.round(464.0, false), 448.0);
        assert!(e4m3.round(465.0, false).is_nan());
        assert_eq!(e4m3.round(465.0, true), 448.0);
        assert_eq!(e4m3.round(f64::NEG_INFINITY, true), -448.0);
        // 1 + 1/16 ties between 1 and 1.125: to 1, the even mantissa.
        assert_eq!(e4m3.round(1.0625, true), 1.0);
        assert_eq!(e4m3.round(1.1875, true), 1.25);
        // The smallest subnormal, 2^-9, and half of it, which ties to 0.
        assert_eq!(e4m3.round(2f64.powi(-9), true), 2f64.powi(-9));
        assert_eq!(e4m3.round(2f64.powi(-10), true), 0.0);
        let e5m2 = MiniFloat::of(ElemType::F8E5M2).unwrap();
        assert_eq!(e5m2.round(1e6, false), f64::INFINITY);
        assert_eq!(e5m2.round(-1e6, true), -57344.0);
        let fnuz = MiniFloat::of(ElemType::F8E4M3FNUZ).unwrap();
        assert!(fnuz.round(-0.0, true).is_sign_positive());
        assert_eq!(fnuz.to_bits(f64::NAN), 0x80);
        assert!(fnuz.round(1e6, false).is_nan());
    }

    #[test]
    fn overflow_starts_half_a_step_past_the_largest() {
        let e4m3 = MiniFloat::of(ElemType::F8E4M3FN).unwrap();
        assert_eq!(e4m3.overflow_bound(), (464.0, false));
        assert_eq!(e4m3.nearest(f64::INFINITY), 448.0);
        let e5m2 = MiniFloat::of(ElemType::F8E5M2).unwrap();
        assert_eq!(e5m2.overflow_bound(), (61440.0, true));
        assert_eq!(e5m2.nearest(f64::NEG_INFINITY), f64::NEG_INFINITY);
        assert_eq!(e5m2.nearest(61439.0), 57344.0);
    }

    #[test]
    fn e2m1_rounds_and_saturates_as_ml_dtypes() {
        // ml_dtypes' float4_e2m1fn, which ONNX's Cast tests are made with.
        let f = MiniFloat::of(ElemType::F4E2M1FN).unwrap();
        let x = [
            0.0, 0.25, 0.3, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.5, 7.0, 100.0, -100.0,
        ];
        let want = [
            0.0, 0.0, 0.5, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, 6.0, -6.0,
        ];
        for (x, want) in x.into_iter().zip(want) {
            assert_eq!(f.round(x, false), want, "{x}");
        }
        let bits = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 6.0, -0.5]
            .map(|x| f.to_bits(f.round(x, false)));
        assert_eq!(bits, [0x8, 0x7, 0xF, 0x8, 0x7, 0x9]);
        assert_eq!(
            f.from_bits(0xF3),
            1.5,
            "bits above the format's are ignored"
        );
    }
}
