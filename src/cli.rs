//! Command-line arguments of `ircc`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "ircc",
    version = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("IRCC_GIT_REVISION"), ")"),
    about = "A multi-level compiler for deep-learning models on mobile GPUs",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub compile: CompileArgs,
    /// List every registered operation with its classes, and exit.
    #[arg(long)]
    pub list_ops: bool,
    /// List the ONNX operators the importer reads, from which opset, and whether each runs as kernels or only at import, and exit.
    #[arg(long)]
    pub list_onnx_ops: bool,
    /// List every registered pass, and exit.
    #[arg(long)]
    pub list_passes: bool,
    /// Describe one operation (graph.conv, kernel.load, ...): its operands, results, attributes with kinds and defaults, and its fusion and layout classes, and exit.
    #[arg(long, value_name = "OP")]
    pub describe_op: Option<String>,
    /// Print the DNNFusion and SmartMem tables of spec/fusion.toml, and exit.
    #[arg(long)]
    pub list_fusion_tables: bool,
    /// Print the device profiles of spec/devices/ (the figures cost models read), and exit.
    #[arg(long)]
    pub list_devices: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Compile a model into a deployable bundle in DIR (spec/plan.md): the kernels' sources, plan.json and weights.safetensors, which `ircc run DIR`, or any host that follows the spec, runs.
    Compile(BundleArgs),
    /// Run a module on inputs and write its outputs as .npy files.
    Run(RunArgs),
    /// Import an ONNX model: write its graph-dialect IR and a .safetensors file of its weights.
    Import(ImportArgs),
    /// Print static figures of a model after a pipeline.
    Stats(StatsArgs),
    /// Run the interpreter before and after every pass of a pipeline on random inputs, and fail on the first pass that changes the results.
    Check(CheckArgs),
    Bench(BenchArgs),
    Tune(TuneArgs),
    Probe(ProbeArgs),
    /// Print a completion script for a shell (bash, zsh, fish, elvish, powershell) to standard output: `ircc completions bash > /etc/bash_completion.d/ircc`.
    Completions {
        /// The shell
        shell: clap_complete::Shell,
    },
    /// Simulate attention on the MAS-Attention paper's edge accelerator: the cycles, DRAM traffic and energy of one schedule, or the paper's Table 2 beside the simulator's.
    SimulateAttention(SimulateAttentionArgs),
}

/// The MAS-Attention edge simulator (sim/attention).
#[derive(Args, Debug)]
pub struct SimulateAttentionArgs {
    /// A workload of the paper's Table 1 by name (BERT-Base, ViT-B/16, Llama3-8B, ...) or HEADS,SEQUENCE,EMBEDDING (12,512,768)
    #[arg(long, required_unless_present = "table2", value_name = "NAME|H,S,E")]
    pub workload: Option<String>,
    /// The schedule: layer-wise, soft-pipe, flat, tileflow or mas
    #[arg(long, default_value = "mas")]
    pub schedule: String,
    /// How tile sizes are searched: genetic, mcts or grid
    #[arg(long, default_value = "mcts")]
    pub search: String,
    /// The search's seed (the search is deterministic for a seed)
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Most tilings the search simulates
    #[arg(long)]
    pub budget: Option<u32>,
    /// Simulate every workload of Table 1 under every schedule and print MAS-Attention's speed-ups beside the paper's
    #[arg(long, conflicts_with = "workload")]
    pub table2: bool,
    /// Print one JSON object
    #[arg(long)]
    pub json: bool,
}

/// Float precision of the generated kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Precision {
    /// f32 storage and arithmetic.
    #[default]
    F32,
    /// f16 storage and arithmetic, f32 accumulation in matmul, conv and reductions.
    F16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
        }
    }
}

/// How the OpenCL runtime builds a program (`--backend opencl`).
#[derive(Args, Clone, Debug, Default)]
pub struct OpenClArgs {
    /// Options for the OpenCL compiler (clBuildProgram) with --backend
    /// opencl, such as '-cl-fast-relaxed-math' or '-cl-opt-disable'.
    #[arg(
        long,
        value_name = "OPTIONS",
        default_value = "",
        allow_hyphen_values = true
    )]
    pub cl_options: String,
}

/// How `kernel.schedule` chooses kernels, when a command lowers for the GPU.
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct KernelArgs {
    /// Kernel precision (with --emit wgsl|opencl or --backend wgpu|opencl); f32 unless
    /// the pipeline's kernel.schedule says otherwise, or a module scheduled already
    /// records its own (kernel.precision).
    #[arg(long, value_enum)]
    pub precision: Option<Precision>,
    /// The fused attention template (with --emit wgsl|opencl or --backend
    /// wgpu|opencl); auto unless the pipeline's kernel.schedule says otherwise.
    #[arg(long, value_enum)]
    pub attention: Option<AttentionTemplate>,
}

/// Which template computes a fused attention op (kernel.schedule{attention=..}).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AttentionTemplate {
    /// Cooperative in f16 where the device has matrix units; else rows where the target's registers hold a query and its weighted sum of values and its invocations fill the device, else tiled.
    Auto,
    /// An invocation per query, holding it and its weighted sum in registers.
    Rows,
    /// An invocation per query and key of a tile, sharing scores through workgroup memory.
    Tiled,
    /// A block of queries per workgroup on the matrix units (f16 operands, f32 scores and sums).
    Cooperative,
}

impl AttentionTemplate {
    pub fn name(self) -> &'static str {
        match self {
            AttentionTemplate::Auto => "auto",
            AttentionTemplate::Rows => "rows",
            AttentionTemplate::Tiled => "tiled",
            AttentionTemplate::Cooperative => "cooperative",
        }
    }
}

/// Measure the GPU wgpu opens with micro-benchmarks (ArchProbe's method,
/// Romou §3) and print its device profile (spec/devices/NAME.toml): limits
/// queried; bandwidths, arithmetic peaks, compute units, caches and lines
/// timed, every figure with a line saying how; a figure whose curve shows
/// no clear answer is left out and listed in `unknown`.
#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// Write the profile to FILE (its name is the file's stem unless --name gives one) instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The profile's name.
    #[arg(long)]
    pub name: Option<String>,
    /// Small sizes and few repetitions, for a CPU driver (lavapipe) or a quick look.
    #[arg(long)]
    pub quick: bool,
}

/// Search the parameters of every matrix product's kernel on the GPU
/// (wgpu) and record the fastest per kernel signature in the tuning
/// database --tuning-db names (merged into it where it exists), which
/// compiling with --tuning-db then reads. The space of each signature is
/// spec/tuning.toml's, pruned by Romou's criteria against --device's
/// profile. Each candidate is timed on its kernel alone: the first
/// product of each signature, cut out of the model with operands of its
/// real shapes, every signature's next candidate lowered and timed in one
/// round; the whole model is then run untuned and tuned, their outputs
/// compared and their times reported.
#[derive(Args, Debug)]
pub struct TuneArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub kernel: KernelArgs,
    /// Configurations measured per kernel signature, the untuned default's included.
    #[arg(long, default_value_t = 24)]
    pub budget: usize,
    /// How each signature's space is searched.
    #[arg(long, value_enum, default_value = "genetic")]
    pub search: SearchKind,
    /// The search's seed: the same seed and the same times give the same trials.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Search every valid configuration, not only those pruning keeps.
    #[arg(long)]
    pub no_prune: bool,
    /// Timed runs of each round's kernels (and, at the end, of the whole model untuned and tuned), after warm-up runs worth about a quarter of a second on a GPU.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Print each kernel signature's space (all points, the valid ones,
    /// those pruning keeps, and what each criterion excludes) and stop;
    /// needs no GPU.
    #[arg(long)]
    pub space_only: bool,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SearchKind {
    /// A seeded genetic search (tournaments, uniform crossover, mutation to neighbouring values).
    Genetic,
    /// Points drawn at random: the genetic search's baseline.
    Random,
}

#[derive(Args, Debug)]
pub struct BundleArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The folder to write the bundle to.
    #[arg(short, long, value_name = "DIR")]
    pub output: PathBuf,
    /// The runtime the bundle is for: WGSL for wgpu, OpenCL C for opencl.
    #[arg(long, value_enum, default_value = "wgpu")]
    pub backend: DeviceBackend,
    #[command(flatten)]
    pub kernel: KernelArgs,
}

/// Compile a model for the GPU and time it (wall clock per run, and per
/// kernel from timestamp queries where the adapter has them).
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Where to run it: wgpu where not given; a bundle runs on the device
    /// its sources are for.
    #[arg(long, value_enum)]
    pub backend: Option<DeviceBackend>,
    #[command(flatten)]
    pub kernel: KernelArgs,
    /// Timed runs (after the warm-up runs).
    #[arg(long, default_value_t = 50)]
    pub runs: usize,
    /// Untimed runs first.
    #[arg(long, default_value_t = 5)]
    pub warmup: usize,
    /// Inputs as NAME=PATH.npy (random, seeded, where not given).
    #[arg(long = "input", value_name = "NAME=PATH")]
    pub inputs: Vec<String>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub bounds: BundleBoundsArgs,
    /// Also print the kernels that take most of the time, each with its
    /// FLOP/s, bytes per second, fraction of the target profile's peak and
    /// what bounds it (where the adapter times kernels).
    #[arg(long)]
    pub roofline: bool,
    #[command(flatten)]
    pub opencl: OpenClArgs,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Relative tolerance, on the scale of each output.
    #[arg(long, default_value_t = 1e-4)]
    pub rtol: f64,
}

/// The model a command works on and the pipeline it goes through.
#[derive(Args, Debug)]
pub struct ModelArgs {
    /// The model: a .ir file or an ONNX model; for `ircc run` and `ircc bench`, also a bundle's folder (--emit wgsl|opencl -o DIR).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    #[command(flatten)]
    pub onnx: OnnxArgs,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
}

/// Options for reading ONNX models.
#[derive(Args, Debug, Clone, Default)]
pub struct OnnxArgs {
    /// The shape of an input with symbolic dimensions: NAME=1x3x224x224 (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=SHAPE")]
    pub input_shapes: Vec<String>,
    /// An input's value, known when compiling: NAME=FILE.npy (repeatable). Where the input feeds an operand that must be a constant (Reshape's shape, Split's sizes, an axis), the model is specialized on this value, and a remark says so; `ircc run` binds the inputs it is given the same way
    #[arg(long = "bind", value_name = "NAME=FILE.npy")]
    pub binds: Vec<String>,
    /// `ircc run`'s inputs (`--input`), bound as `--bind` binds a value
    /// where the model needs one when compiling.
    #[arg(skip)]
    pub run_inputs: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The ONNX model (weights in external data are read from beside it).
    #[arg(value_name = "MODEL.onnx")]
    pub file: PathBuf,
    #[command(flatten)]
    pub onnx: OnnxArgs,
    /// The IR file to write; the weights go beside it as NAME.safetensors.
    #[arg(short = 'o', long, value_name = "FILE.ir")]
    pub output: PathBuf,
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The kernels whose dispatches are counted, as a command that runs
    /// the model would schedule them.
    #[command(flatten)]
    pub kernel: KernelArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Emit {
    /// ircc's pretty form.
    Ir,
    /// MLIR's generic form, readable by mlir-opt.
    Generic,
    /// The graph for Graphviz: one cluster per kernel, eliminated layout ops dashed.
    Dot,
    /// One self-contained HTML page drawing the graph (no Graphviz needed):
    /// a box per kernel with its ops, eliminated layout ops, shapes and bytes.
    Html,
    /// A bundle in the directory given by -o (spec/plan.md): one .wgsl
    /// file per kernel, plan.json and weights.safetensors, which `ircc run
    /// DIR` runs; without -o, every shader to stdout.
    Wgsl,
    /// A bundle of the kernels' OpenCL C program (kernels.cl), plan.json
    /// and weights.safetensors in the directory given by -o; without -o,
    /// the program to stdout.
    Opencl,
}

impl Emit {
    /// The device whose sources this prints, if any.
    pub fn device(self) -> Option<crate::gpu::Device> {
        match self {
            Emit::Wgsl => Some(crate::gpu::Device::Wgpu),
            Emit::Opencl => Some(crate::gpu::Device::OpenCl),
            Emit::Ir | Emit::Generic | Emit::Dot | Emit::Html => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// The CPU reference interpreter.
    Reference,
    /// The GPU through wgpu (Vulkan preferred; WGPU_BACKEND chooses another).
    Wgpu,
    /// OpenCL C through the OpenCL ICD loader (a GPU preferred;
    /// IRCC_OPENCL_DEVICE=NAME chooses a device by a part of its name).
    Opencl,
}

/// The bounds `ircc run DIR` and `ircc bench DIR` hold a bundle to before
/// setting anything up.
#[derive(Args, Debug, Clone)]
pub struct BundleBoundsArgs {
    /// The most invocations a bundle's dispatches may run in one run, all
    /// together (a bundle is a file from elsewhere: one asking for 65535 x
    /// 65535 x 16 workgroups would run for days); checked before anything
    /// is set up. Published networks run well under 10^9.
    #[arg(long, value_name = "N", default_value_t = crate::bundle::Bounds::DEFAULT.max_invocations)]
    pub max_invocations: u64,
    /// The most bytes a bundle's buffers may take on the device, all
    /// together; checked before anything is allocated.
    #[arg(long, value_name = "BYTES", default_value_t = crate::bundle::Bounds::DEFAULT.max_bytes)]
    pub max_bytes: u64,
    /// The largest plan.json or kernel source file of a bundle read, in
    /// bytes: a shader compiler takes time and memory in proportion to its
    /// source (a 200 MiB one, gigabytes). A published network's largest
    /// (one OpenCL C file of all its kernels) is under 1 MiB.
    #[arg(long, value_name = "BYTES", default_value_t = crate::bundle::Bounds::DEFAULT.max_source_bytes)]
    pub max_source_bytes: u64,
}

/// The backends `ircc bench` times: those with a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DeviceBackend {
    /// The GPU through wgpu (Vulkan preferred; WGPU_BACKEND chooses another).
    Wgpu,
    /// OpenCL C through the OpenCL ICD loader (a GPU preferred;
    /// IRCC_OPENCL_DEVICE=NAME chooses a device by a part of its name).
    Opencl,
}

impl DeviceBackend {
    pub fn device(self) -> crate::gpu::Device {
        match self {
            DeviceBackend::Wgpu => crate::gpu::Device::Wgpu,
            DeviceBackend::Opencl => crate::gpu::Device::OpenCl,
        }
    }
}

impl Backend {
    /// The device it runs kernels on; none for the interpreter.
    pub fn device(self) -> Option<crate::gpu::Device> {
        match self {
            Backend::Reference => None,
            Backend::Wgpu => Some(crate::gpu::Device::Wgpu),
            Backend::Opencl => Some(crate::gpu::Device::OpenCl),
        }
    }
}

/// How to transform a module: shared by compilation and `run`.
#[derive(Args, Debug, Clone, Default)]
pub struct PipelineArgs {
    /// A named pipeline (spec/pipelines/NAME.pipeline) or a path to a .pipeline file.
    #[arg(long, value_name = "NAME|PATH", conflicts_with = "passes")]
    pub pipeline: Option<String>,
    /// Passes to run, comma-separated, with options: 'canonicalize,foo{key=value}'.
    #[arg(long, value_name = "PASSES")]
    pub passes: Option<String>,
    /// A folder whose fusion.toml (the DNNFusion and SmartMem tables),
    /// pipelines/NAME.pipeline, devices/NAME.toml (for --device NAME),
    /// rules/algebra.rules (graph.math-rewrite's), rules/dnnfusion.rules
    /// (the rules pass's) and tuning.toml (ircc tune's search space)
    /// replace the built-in ones, read at run time.
    #[arg(long, value_name = "DIR")]
    pub spec_dir: Option<PathBuf>,
    /// A plugin library whose passes pipelines may then name (built with
    /// ircc_core::declare_plugin! against this ircc); may be repeated.
    #[arg(long, value_name = "LIB")]
    pub load_pass_plugin: Vec<PathBuf>,
    /// A rule file (spec/rules.md) to run as the pass rules{file=FILE},
    /// before the pipeline's graph.math-rewrite, or first where it has
    /// none; may be repeated.
    #[arg(long, value_name = "FILE")]
    pub load_rules: Vec<PathBuf>,
    /// The device profile the module is compiled for (its ircc.target,
    /// which graph.fuse, kernel.schedule, layout.select, texture.map and the printers
    /// read; ircc --list-devices), or auto: the profile matching the
    /// adapter the command opens. Default: auto for commands that open a
    /// device (run on wgpu or opencl, bench, tune), else the module's own
    /// target or adreno740.
    #[arg(long, value_name = "NAME|auto")]
    pub device: Option<String>,
    /// A tuning database `ircc tune` wrote for the device: the matrix
    /// products whose signature it lists take its parameters
    /// (kernel.schedule{tuning-db=PATH}); a database of another device or
    /// template version is refused. `ircc tune` writes to it instead.
    #[arg(long, value_name = "PATH")]
    pub tuning_db: Option<PathBuf>,
    /// No progress bars (they are drawn only where stderr is a terminal).
    #[arg(long)]
    pub quiet: bool,
    /// Print the IR after every pass (to stderr).
    #[arg(long)]
    pub print_ir_after_all: bool,
    /// Print what passes decided and why, such as a tensor left in a
    /// buffer by texture.map (to stderr).
    #[arg(long)]
    pub remarks: bool,
    /// Print the IR after the named pass (to stderr); may be repeated.
    #[arg(long, value_name = "PASS")]
    pub print_ir_after: Vec<String>,
    /// Write the IR after each pass to DIR/NN-pass.ir.
    #[arg(long, value_name = "DIR")]
    pub dump_dir: Option<PathBuf>,
    /// Print a table of where the command's time went (to stderr): import
    /// or parse, each pass, and for a device the code generation, GPU setup
    /// and runs.
    #[arg(long)]
    pub timing: bool,
    /// Do not verify the module after each pass.
    #[arg(long)]
    pub no_verify_each: bool,
    /// Accept operations that no registered dialect declares.
    #[arg(long)]
    pub allow_unregistered_dialect: bool,
}

impl Cli {
    /// The pipeline arguments of the command line's command.
    pub fn pipeline(&self) -> &PipelineArgs {
        match &self.command {
            Some(Command::Run(a)) => &a.model.pipeline,
            Some(Command::Stats(a)) => &a.model.pipeline,
            Some(Command::Check(a)) => &a.model.pipeline,
            Some(Command::Bench(a)) => &a.model.pipeline,
            Some(Command::Compile(a)) => &a.model.pipeline,
            Some(Command::Tune(a)) => &a.model.pipeline,
            Some(
                Command::Import(_)
                | Command::SimulateAttention(_)
                | Command::Probe(_)
                | Command::Completions { .. },
            )
            | None => &self.compile.pipeline,
        }
    }
}

impl PipelineArgs {
    /// The device profile `--device` names: the spec folder's
    /// `devices/NAME.toml` where `--spec-dir` has one, else the built-in
    /// profile's name; an error where that entry is no regular file.
    pub fn device_profile(&self) -> Result<Option<String>, ircc_core::Diagnostic> {
        let Some(device) = self.device.as_ref() else {
            return Ok(None);
        };
        let file = match self.spec_dir.as_deref() {
            Some(dir) => crate::spec_file(dir, &format!("devices/{device}.toml"))?,
            None => None,
        };
        Ok(Some(file.map_or_else(
            || device.clone(),
            |p| p.to_string_lossy().into_owned(),
        )))
    }

    /// How reports name the chosen pipeline: its name, the pass list, or
    /// `none`.
    pub fn label(&self) -> String {
        self.pipeline
            .clone()
            .or(self.passes.clone())
            .unwrap_or_else(|| "none".into())
    }
}

#[derive(Args, Debug)]
pub struct CompileArgs {
    /// The input: a .ir file (pretty or generic form, '-' for stdin) or an ONNX model.
    #[arg(value_name = "FILE", required_unless_present_any = ["list_ops", "list_onnx_ops", "list_passes", "describe_op", "list_fusion_tables", "list_devices"])]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub onnx: OnnxArgs,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// What to print.
    #[arg(long, value_enum, default_value = "ir")]
    pub emit: Emit,
    /// Write the output here instead of stdout.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub kernel: KernelArgs,
}

/// The file format of `ircc run`'s outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// One NAME.npy per output.
    Npy,
    /// One outputs.safetensors holding every output by name.
    Safetensors,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Where to run it.
    #[arg(long, value_enum, default_value = "reference")]
    pub backend: Backend,
    /// An input: NAME=PATH.npy, or PATH.npy for the inputs in order; a
    /// .safetensors file given alone holds inputs by name (NAME=FILE.safetensors
    /// takes its tensor NAME). Each in the input's type: numpy's, or for
    /// bfloat16, the 8- and 4-bit floats and 4- and 2-bit integers the
    /// form ml_dtypes saves (spec/io.md).
    #[arg(long = "input", value_name = "NAME=PATH")]
    pub inputs: Vec<String>,
    /// Directory for the outputs, one NAME.npy per result (or one
    /// outputs.safetensors), each in the model's type.
    #[arg(long, value_name = "DIR")]
    pub output_dir: PathBuf,
    /// How the outputs are written.
    #[arg(long, value_enum, default_value = "npy")]
    pub output_format: OutputFormat,
    /// The function to run.
    #[arg(long, default_value = "main")]
    pub entry: String,
    #[command(flatten)]
    pub bounds: BundleBoundsArgs,
    /// Ends the command with an error after SECONDS of wall-clock time
    /// (compiling, setting up and running): a device such as lavapipe has
    /// no watchdog of its own. It ends the process, whatever the device
    /// is doing.
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
    #[command(flatten)]
    pub opencl: OpenClArgs,
    #[command(flatten)]
    pub kernel: KernelArgs,
}
