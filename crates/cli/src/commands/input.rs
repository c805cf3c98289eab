//! Rules every subcommand shares for what it is given: thread counts, and
//! text read from a file or standard input (`-`), which must be UTF-8.

use crate::error::{CliError, CliResult};
use std::io::{self, Read};
use std::path::Path;

use ferrite::{available_cores, Threads};

/// The most threads `-t` takes (as ggml's `GGML_MAX_N_THREADS`): far more
/// than a CPU has cores, and few enough for any OS to start.
pub const MAX_THREADS: usize = 512;

/// The value parser of every `-t/--threads`: a count from 1 to
/// [`MAX_THREADS`]. Leaving the option out means one thread per core.
pub fn parse_threads(s: &str) -> Result<usize, ferrite::Error> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
        _ => Err(ferrite::Error::Input(format!(
            "give 1 to {MAX_THREADS} threads (leave -t out for one per core: {} here)",
            available_cores()
        ))),
    }
}

/// The thread pool for `-t` (`None`: one thread per core); an error, not a
/// panic, when the OS cannot start that many threads.
pub fn threads(n: Option<usize>) -> CliResult<Threads> {
    Ok(Threads::try_new(n.unwrap_or_else(available_cores))?)
}

/// How an input is named in messages: its path, or "standard input".
pub fn input_name(source: &str) -> &str {
    match source {
        "-" => "standard input",
        path => path,
    }
}

/// The bytes of file `source`, or of standard input for `-`.
pub fn read_source(source: &str) -> CliResult<Vec<u8>> {
    let mut bytes = Vec::new();
    match source {
        "-" => {
            io::stdin()
                .lock()
                .read_to_end(&mut bytes)
                .map_err(|e| CliError::read("reading standard input", e))?;
        }
        path => bytes = std::fs::read(path).map_err(|e| CliError::read(path, e))?,
    }
    Ok(bytes)
}

/// The error for input `name` whose bytes are valid UTF-8 only up to
/// `valid_up_to`; `first_line` is the number of the line `bytes` starts
/// with and `base` its offset in the input.
pub fn utf8_error(
    name: &str,
    bytes: &[u8],
    valid_up_to: usize,
    first_line: usize,
    base: usize,
) -> CliError {
    let before = &bytes[..valid_up_to];
    let line = first_line + before.iter().filter(|&&b| b == b'\n').count();
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let problem = format!(
        "line {line} is not valid UTF-8: byte 0x{:02x} at offset {} of the line \
         ({} of the input)",
        bytes[valid_up_to],
        valid_up_to - line_start,
        base + valid_up_to
    );
    CliError::input(name, problem)
}

/// `bytes` as text, or an error naming the line and offset of the first
/// byte that is not UTF-8.
pub fn utf8_text(name: &str, bytes: Vec<u8>) -> CliResult<String> {
    String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        utf8_error(name, e.as_bytes(), valid, 1, 0)
    })
}

/// The lines of `bytes` (`\n` or `\r\n` endings), all checked before any
/// is returned: the first that is not UTF-8 is an error naming it.
pub fn utf8_lines(name: &str, bytes: &[u8]) -> CliResult<Vec<String>> {
    if let Err(e) = std::str::from_utf8(bytes) {
        return Err(utf8_error(name, bytes, e.valid_up_to(), 1, 0));
    }
    Ok(bytes
        .split_inclusive(|&b| b == b'\n')
        .map(|line| {
            let line = line.strip_suffix(b"\n").unwrap_or(line);
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            // Checked above, and a line ends before a newline byte, which
            // never splits a character.
            String::from_utf8_lossy(line).into_owned()
        })
        .collect())
}

/// Text given as a file or `-` (standard input) for a prompt: UTF-8, one
/// final newline removed (as llama.cpp's `-f` does).
pub fn read_prompt(source: &str) -> CliResult<String> {
    let mut text = utf8_text(input_name(source), read_source(source)?)?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

/// Whether the file at `path` reads as text rather than a model: no NUL
/// byte and UTF-8 in its first 8 KiB. Model files are binary from their
/// first bytes (GGUF's version, llama2.c's and safetensors' header sizes).
fn looks_like_text(path: &Path) -> bool {
    let mut head = Vec::new();
    let read = std::fs::File::open(path).and_then(|f| f.take(8192).read_to_end(&mut head));
    if read.is_err() || head.contains(&0) {
        return false;
    }
    match std::str::from_utf8(&head) {
        Ok(_) => true,
        // A character cut by the 8 KiB limit.
        Err(e) => e.error_len().is_none(),
    }
}

/// An error when the model argument of `command` names a text file (the
/// input given where the model belongs): a clearer message than a model
/// loader's complaint about the file's first bytes.
pub fn refuse_text_file(model: Option<&str>, command: &str) -> CliResult {
    let Some(arg) = model else {
        return Ok(());
    };
    let path = Path::new(arg);
    if !path.is_file() || !looks_like_text(path) {
        return Ok(());
    }
    let usage = match command {
        "embed" => format!(
            "`ferrite embed [MODEL] [FILE]` takes the model first: \
             `ferrite embed minilm {arg}` embeds it with the default model"
        ),
        "translate" => format!(
            "`ferrite translate MODEL_DIR [FILE]` takes the model directory first, \
             e.g. `ferrite translate path/to/opus-mt-en-de {arg}`"
        ),
        "run" => format!("a prompt in a file is given with -f: `ferrite run -f {arg}`"),
        _ => format!("`ferrite {command} --help` says what it takes"),
    };
    Err(CliError::usage(format!(
        "{arg} is a text file, not a model: {usage}"
    )))
}

/// One warning on stderr per input line that was cut to `max` tokens
/// (the first five, by 1-based line number), then a count.
pub fn warn_cut(lines: &[usize], max: usize) {
    for i in lines.iter().take(5) {
        eprintln!("ferrite: warning: input {i} is longer than {max} tokens; truncated");
    }
    if lines.len() > 5 {
        eprintln!(
            "ferrite: warning: {} inputs in all were truncated to {max} tokens",
            lines.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_errors_name_the_line_and_offsets() {
        let bytes = b"ok\nfine\nba\xffd\n";
        let e = utf8_lines("f.txt", bytes).unwrap_err();
        assert_eq!(
            e.to_string(),
            "f.txt: line 3 is not valid UTF-8: byte 0xff at offset 2 of the line (10 of the input)"
        );
        assert_eq!(
            utf8_lines("f", b"a\r\n\nb").unwrap(),
            vec!["a".to_string(), String::new(), "b".to_string()]
        );
    }

    #[test]
    fn thread_counts() {
        assert_eq!(parse_threads("3").ok(), Some(3));
        assert!(parse_threads("0").is_err());
        assert!(parse_threads("513").is_err());
        assert!(parse_threads("-1").is_err());
    }
}
