//! `ferrite inspect FILE_OR_DIR`: a human-readable summary, `--json` for
//! machines, or `--tensor NAME --values N` for raw values.

use crate::error::CliResult;
use std::io::{self, BufWriter, Write};
use std::sync::Arc;

use ferrite::tools;
use ferrite::tools::GgufFile;
use ferrite::tools::{inspect, inspect_gguf, tensor_values, Report};

#[derive(clap::Args)]
pub struct Args {
    /// A GGUF file, a safetensors model directory, or a short name
    /// (smollm2, gemma3-270m, minilm).
    model: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Print values of this tensor instead of the summary.
    #[arg(long, value_name = "NAME")]
    tensor: Option<String>,
    /// With --tensor: how many values (from the start), one per line.
    #[arg(long, value_name = "N", default_value_t = 16, requires = "tensor")]
    values: usize,
    /// In the text summary, print every metadata array in full.
    #[arg(long)]
    full: bool,
}

pub fn run(args: Args) -> CliResult {
    let path = tools::resolve(&args.model)?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    if let Some(name) = &args.tensor {
        for v in tensor_values(&path, name, args.values)? {
            // `{:?}` is Rust's shortest representation that reads back to
            // the same f32 (e.g. 0.1, 1e-5, -0.0, NaN, inf).
            let written = writeln!(out, "{v:?}");
            if written.is_err() {
                return super::output_result(written);
            }
        }
        return super::output_result(out.flush());
    }
    let is_gguf = path.is_file() && path.extension().is_none_or(|e| e != "safetensors");
    let (report, gguf) = if is_gguf {
        // A GGUF file, or a llama2.c checkpoint read as one (`ferrite::open`'s rules).
        let file = match ferrite::tools::find(&path, &Default::default()) {
            Ok(ferrite::tools::Found::Generator(file)) => file,
            Ok(_) => Arc::new(GgufFile::open(&path)?),
            Err(e) => return Err(e.into()),
        };
        (inspect_gguf(&file)?, Some(file))
    } else {
        (inspect(&path)?, None)
    };
    let written = if args.json {
        serde_json::to_writer(&mut out, &report.to_json())
            .map_err(io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        print_text(&mut out, &report, gguf.as_deref(), args.full)
    };
    super::output_result(written.and_then(|()| out.flush()))
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

fn human_count(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=9_999_999 => format!("{:.1} K", n as f64 / 1e3),
        10_000_000..=9_999_999_999 => format!("{:.1} M", n as f64 / 1e6),
        _ => format!("{:.2} B", n as f64 / 1e9),
    }
}

fn print_text(
    out: &mut impl Write,
    r: &Report,
    gguf: Option<&GgufFile>,
    full: bool,
) -> io::Result<()> {
    let format = match r.gguf_version {
        Some(v) => format!("GGUF v{v}"),
        None => "safetensors".to_string(),
    };
    writeln!(
        out,
        "file          {} ({format}, {})",
        r.path,
        human_bytes(r.file_size)
    )?;
    writeln!(
        out,
        "architecture  {}",
        r.architecture.as_deref().unwrap_or("(not stated)")
    )?;
    writeln!(
        out,
        "parameters    {} ({})",
        human_count(r.parameter_count()),
        r.parameter_count()
    )?;
    match (&r.tokenizer_kind, r.tokenizer_size) {
        (Some(kind), Some(n)) => writeln!(out, "tokenizer     {kind}, {n} tokens")?,
        (Some(kind), None) => writeln!(out, "tokenizer     {kind}")?,
        _ => writeln!(out, "tokenizer     (none)")?,
    }
    writeln!(
        out,
        "chat template {}",
        if r.chat_template { "yes" } else { "no" }
    )?;

    writeln!(out, "\nhyper-parameters")?;
    for (k, v) in &r.hyperparameters {
        writeln!(out, "  {k:<40} {v}")?;
    }

    writeln!(out, "\nblock types")?;
    for (ty, n, bytes) in r.type_histogram() {
        let share = 100.0 * bytes as f64 / r.file_size.max(1) as f64;
        writeln!(
            out,
            "  {ty:<8} {n:>5} tensors {:>12} {share:>5.1}%",
            human_bytes(bytes)
        )?;
    }

    if let Some(file) = gguf {
        writeln!(out, "\nmetadata ({} keys)", file.metadata().len())?;
        for (k, v) in file.metadata().iter() {
            let shown = if full {
                ferrite::tools::value_to_json(v).to_string()
            } else {
                let s = v.to_string();
                truncate_chars(&s, 120)
            };
            writeln!(out, "  {k:<40} {:<7} {shown}", v.value_type().name())?;
        }
    }

    writeln!(out, "\ntensors ({})", r.tensors.len())?;
    let width = r
        .tensors
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    writeln!(
        out,
        "  {:<width$} {:<22} {:<8} {:>12}",
        "name", "shape", "type", "bytes"
    )?;
    for t in &r.tensors {
        let shape = format!("{:?}", t.shape);
        writeln!(
            out,
            "  {:<width$} {shape:<22} {:<8} {:>12}",
            t.name, t.ty, t.bytes
        )?;
    }
    Ok(())
}

/// At most `max` characters of `s`, with an ellipsis if cut (never splits a
/// character).
fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}
