//! `ircc bench`'s roofline: each kernel's floating-point operations (the
//! `flops` kernel.lower records on the products it builds) and the bytes
//! of its arguments, as rates over its measured time and as fractions of
//! the target profile's peaks, with what bounds it — arithmetic where its
//! operations per byte exceed the peaks' ratio, else memory.

use ircc_core::{Attribute, Module, Type};
use ircc_dialects::kernel::{DeviceProfile, ops};

/// One kernel's place under the roofline.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelRoof {
    pub name: String,
    pub template: String,
    pub median_us: f64,
    pub flops: Option<i64>,
    /// Every argument's bytes, read or written once.
    pub bytes: i64,
    /// The peak its arithmetic runs against: the matrix units' for a
    /// cooperative-matrix kernel, else the precision's vector peak.
    pub peak_gflops: Option<f64>,
    pub peak_gbs: f64,
}

impl KernelRoof {
    /// Kernel `name` of `m`, timed at `median_us`, on `profile`.
    pub fn of(m: &Module, name: &str, median_us: f64, profile: &DeviceProfile) -> Option<Self> {
        let func = ops::Func::new(m, m.lookup_symbol(name)?)?;
        let o = m.op(func.id());
        let Some(Attribute::Type(Type::Function { inputs, .. })) = o.attr("function_type") else {
            return None;
        };
        let bytes = inputs
            .iter()
            .filter_map(Type::as_tensor)
            .map(|t| t.num_elements() * i64::from(t.elem.bits()).max(8) / 8)
            .sum();
        let template = o
            .attr("template")
            .and_then(Attribute::as_str)
            .unwrap_or("")
            .to_string();
        let f16 = inputs
            .iter()
            .filter_map(Type::as_tensor)
            .any(|t| t.elem == ircc_core::ElemType::F16);
        let on_matrix_units = ["matmul_cooperative", "attention_cooperative"];
        let peak_gflops = if on_matrix_units.contains(&template.as_str()) {
            profile
                .cooperative_matrix
                .iter()
                .filter_map(|c| c.peak_gflops)
                .reduce(f64::max)
        } else if f16 {
            profile.peak_f16_gflops
        } else {
            profile.peak_f32_gflops
        };
        Some(KernelRoof {
            name: name.to_string(),
            template,
            median_us,
            flops: o.attr("flops").and_then(Attribute::as_i64),
            bytes,
            peak_gflops,
            peak_gbs: profile.memory_bandwidth_gbs,
        })
    }

    pub fn gflops_per_s(&self) -> Option<f64> {
        Some(self.flops? as f64 / (self.median_us * 1e3))
    }

    pub fn gb_per_s(&self) -> f64 {
        self.bytes as f64 / (self.median_us * 1e3)
    }

    /// What bounds it at the peaks: `compute` where its operations per
    /// byte exceed the peaks' ratio (the roofline's ridge), else `memory`.
    pub fn bound(&self) -> &'static str {
        match (self.flops, self.peak_gflops) {
            (Some(f), Some(p)) if f as f64 / self.bytes as f64 > p / self.peak_gbs => "compute",
            _ => "memory",
        }
    }

    /// Its rate as a fraction of the peak that bounds it.
    pub fn of_peak(&self) -> Option<f64> {
        match self.bound() {
            "compute" => Some(self.gflops_per_s()? / self.peak_gflops?),
            _ => Some(self.gb_per_s() / self.peak_gbs),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "median_us": self.median_us,
            "template": self.template,
            "flops": self.flops,
            "bytes": self.bytes,
            "gflops_per_s": self.gflops_per_s(),
            "gb_per_s": self.gb_per_s(),
            "bound": self.bound(),
            "of_peak": self.of_peak(),
        })
    }
}

/// The `top` kernels by time, as a table.
pub fn table(kernels: &[KernelRoof], top: usize) -> String {
    let mut sorted: Vec<&KernelRoof> = kernels.iter().collect();
    sorted.sort_by(|a, b| b.median_us.total_cmp(&a.median_us));
    let total: f64 = kernels.iter().map(|k| k.median_us).sum();
    let mut out = format!(
        "{:<22} {:<19} {:>9} {:>6} {:>10} {:>8} {:>8}  {}\n",
        "kernel", "template", "us", "time", "GFLOP/s", "GB/s", "of peak", "bound"
    );
    for k in sorted.into_iter().take(top) {
        let gflops = k
            .gflops_per_s()
            .map_or("-".to_string(), |g| format!("{g:.0}"));
        let peak = k
            .of_peak()
            .map_or("-".to_string(), |f| format!("{:.1}%", 100.0 * f));
        out += &format!(
            "{:<22} {:<19} {:>9.1} {:>5.1}% {:>10} {:>8.0} {:>8}  {}\n",
            k.name,
            k.template,
            k.median_us,
            100.0 * k.median_us / total.max(f64::MIN_POSITIVE),
            gflops,
            k.gb_per_s(),
            peak,
            k.bound()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roof(flops: Option<i64>, bytes: i64, us: f64) -> KernelRoof {
        KernelRoof {
            name: "k0".into(),
            template: "matmul_tiled".into(),
            median_us: us,
            flops,
            bytes,
            peak_gflops: Some(60_000.0),
            peak_gbs: 3_000.0,
        }
    }

    #[test]
    fn a_kernel_is_bound_by_the_side_of_the_ridge_its_intensity_falls_on() {
        // 20 operations a byte is the ridge: 2 GFLOP over 12 MB is above.
        let product = roof(Some(2_000_000_000), 12_000_000, 100.0);
        assert_eq!(product.bound(), "compute");
        assert_eq!(product.gflops_per_s(), Some(20_000.0));
        assert!((product.of_peak().unwrap() - 1.0 / 3.0).abs() < 1e-12);
        // Element-wise: no products, 30 MB in 20 us = 1500 GB/s, half the peak.
        let copy = roof(None, 30_000_000, 20.0);
        assert_eq!(copy.bound(), "memory");
        assert_eq!(copy.of_peak(), Some(0.5));
        let t = table(&[copy, product], 1);
        assert!(t.lines().nth(1).unwrap().contains("100.0"), "{t}");
        assert_eq!(t.lines().count(), 2);
    }
}
