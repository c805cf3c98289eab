//! Starting `ferrite serve` on a free port and talking raw HTTP/1.1 to it
//! over std's TcpStream (no client library), for the server tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running server; killed when dropped.
pub struct Server {
    pub port: u16,
    child: Option<Child>,
}

/// A port nothing listens on right now.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().unwrap().port()
}

impl Server {
    /// Starts `ferrite serve ARGS` (2 threads) and waits for `/ready`.
    pub fn start(args: &[&str]) -> Server {
        let mut s = Server::spawn(args, &[], Stdio::inherit());
        s.wait_ready();
        s
    }

    /// Starts `ferrite serve ARGS` (2 threads) with the environment
    /// variables `envs` added, without waiting for it.
    pub fn spawn(args: &[&str], envs: &[(&str, &str)], stderr: Stdio) -> Server {
        Server::spawn_wrapped(&[], args, envs, stderr)
    }

    /// As [`Self::spawn`], run through the command `wrapper` (`prlimit
    /// ... --`, say: it must exec ferrite, keeping its process id).
    pub fn spawn_wrapped(
        wrapper: &[&str],
        args: &[&str],
        envs: &[(&str, &str)],
        stderr: Stdio,
    ) -> Server {
        let port = free_port();
        let ferrite = env!("CARGO_BIN_EXE_ferrite");
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(ferrite);
                c
            }
            None => Command::new(ferrite),
        };
        let child = command
            .arg("serve")
            .args(args)
            .args(["--port", &port.to_string(), "--threads", "2"])
            .env("FERRITE_LOG", "error")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start ferrite serve");
        Server {
            port,
            child: Some(child),
        }
    }

    /// Waits (at most 120 s) until `/ready` answers 200.
    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(r) = self.try_request("GET", "/ready", &[], b"") {
                if r.status == 200 {
                    return;
                }
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("ferrite serve exited early: {status}");
            }
            assert!(Instant::now() < deadline, "server not ready after 120 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits (at most 120 s) until the port accepts connections.
    pub fn wait_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.connect().is_err() {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("ferrite serve exited early: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "server not listening after 120 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The server's standard error, if it was spawned with a pipe there.
    pub fn take_stderr(&mut self) -> Option<std::process::ChildStderr> {
        self.child.as_mut()?.stderr.take()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let st = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// Waits for the process to exit (at most `timeout`).
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut().unwrap();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                self.child = None;
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "server did not exit in {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn connect(&self) -> std::io::Result<TcpStream> {
        let s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(300)))?;
        Ok(s)
    }

    pub fn try_request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Response> {
        let mut s = self.connect()?;
        let written = s.write_all(&request_bytes(method, path, headers, body));
        read_answer(s, written)
    }

    /// As [`Self::try_request`] with the body sent in 64 KiB chunks
    /// (`transfer-encoding: chunked`, no declared length).
    pub fn try_chunked_request(&self, path: &str, body: &[u8]) -> std::io::Result<Response> {
        let mut s = self.connect()?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\
             content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        let mut written = s.write_all(head.as_bytes());
        for chunk in body.chunks(64 << 10) {
            if written.is_err() {
                break;
            }
            let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
            frame.extend_from_slice(chunk);
            frame.extend_from_slice(b"\r\n");
            written = s.write_all(&frame);
        }
        if written.is_ok() {
            written = s.write_all(b"0\r\n\r\n");
        }
        read_answer(s, written)
    }

    /// One request; the whole response.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        self.try_request(method, path, headers, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    pub fn get(&self, path: &str) -> Response {
        self.request("GET", path, &[], b"")
    }

    pub fn post(&self, path: &str, body: &Value) -> Response {
        self.request(
            "POST",
            path,
            &[("content-type", "application/json")],
            body.to_string().as_bytes(),
        )
    }

    /// The ids `/v1/models` lists, in order.
    pub fn model_ids(&self) -> Vec<String> {
        let v = self.get("/v1/models").json();
        v["data"]
            .as_array()
            .unwrap_or_else(|| panic!("no model list: {v}"))
            .iter()
            .map(|m| m["id"].as_str().expect("a model id").to_string())
            .collect()
    }

    /// A metric's value (first sample whose line starts with `name`).
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.get("/metrics").text();
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in\n{text}"))
    }

    /// Polls until `metric(name) == value` or `timeout` passes; returns
    /// whether it got there.
    pub fn wait_metric(&self, name: &str, value: f64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.metric(name) == value {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The response on `s` after writing a request. A server that answers
/// before reading the whole body (413) may close while we write: the
/// answer can still be read, so a failed write only counts without one.
fn read_answer(mut s: TcpStream, written: std::io::Result<()>) -> std::io::Result<Response> {
    let mut raw = Vec::new();
    let read = s.read_to_end(&mut raw);
    if raw.windows(4).any(|w| w == b"\r\n\r\n") {
        return Ok(parse_response(&raw));
    }
    written?;
    read?;
    Ok(parse_response(&raw))
}

pub fn request_bytes(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("UTF-8 body")
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The `data:` payloads of an SSE body, in order.
    pub fn sse(&self) -> Vec<String> {
        sse_data(&self.text())
    }

    /// An OpenAI error body's message, checking its shape.
    pub fn error_message(&self) -> String {
        let v = self.json();
        let e = &v["error"];
        assert!(e["type"].is_string(), "not an OpenAI error: {v}");
        e["message"].as_str().expect("error.message").to_string()
    }
}

pub fn sse_data(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter_map(|frame| {
            let data: Vec<&str> = frame
                .lines()
                .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
                .collect();
            (!data.is_empty()).then(|| data.join("\n"))
        })
        .collect()
}

fn parse_response(raw: &[u8]) -> Response {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response has a header");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_text = String::from_utf8_lossy(&data[..eol]);
        let size =
            usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap_or(0);
        if size == 0 {
            return out;
        }
        let start = eol + 2;
        let end = (start + size).min(data.len());
        out.extend_from_slice(&data[start..end]);
        data = &data[(end + 2).min(data.len())..];
    }
}

/// A streaming request read incrementally: SSE `data:` payloads one by
/// one, so a test can stop reading (and disconnect) midway.
pub struct Stream {
    reader: BufReader<TcpStream>,
    pub status: u16,
}

impl Stream {
    pub fn open(server: &Server, path: &str, body: &Value) -> Stream {
        let mut s = server.connect().expect("connect");
        s.write_all(&request_bytes(
            "POST",
            path,
            &[("content-type", "application/json")],
            body.to_string().as_bytes(),
        ))
        .unwrap();
        let mut reader = BufReader::new(s);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" || line.is_empty() {
                break;
            }
        }
        Stream { reader, status }
    }

    /// The next `data:` payload (chunk framing skipped), or `None` at the end.
    pub fn next_data(&mut self) -> Option<String> {
        let mut line = String::new();
        loop {
            line.clear();
            if self.reader.read_line(&mut line).ok()? == 0 {
                return None;
            }
            if let Some(d) = line.trim_end().strip_prefix("data: ") {
                return Some(d.to_string());
            }
        }
    }
}

/// The text a stream of chat or text-completion chunks adds up to, per
/// choice index.
pub fn stream_texts(frames: &[String]) -> Vec<String> {
    let mut texts: Vec<String> = Vec::new();
    for f in frames {
        if f == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(f).unwrap_or_else(|e| panic!("{e}: {f}"));
        for c in v["choices"].as_array().into_iter().flatten() {
            let i = c["index"].as_u64().unwrap() as usize;
            if texts.len() <= i {
                texts.resize(i + 1, String::new());
            }
            let piece = c["delta"]["content"]
                .as_str()
                .or(c["text"].as_str())
                .unwrap_or("");
            texts[i].push_str(piece);
        }
    }
    texts
}

/// The texts of a non-streamed response, per choice.
pub fn full_texts(v: &Value) -> Vec<String> {
    v["choices"]
        .as_array()
        .unwrap_or_else(|| panic!("no choices: {v}"))
        .iter()
        .map(|c| {
            c["message"]["content"]
                .as_str()
                .or(c["text"].as_str())
                .unwrap()
                .to_string()
        })
        .collect()
}

/// HTTP/2 with prior knowledge (h2c): the preface and an empty SETTINGS.
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

/// One HTTP/2 frame: (type, flags, stream, payload); `None` at EOF.
pub fn read_frame(s: &mut TcpStream) -> Option<(u8, u8, u32, Vec<u8>)> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head).ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).ok()?;
    Some((head[3], head[4], stream, payload))
}

pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend([kind, flags]);
    f.extend(stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// `GET path` as an HTTP/2 HEADERS frame on `stream` (HPACK: static
/// indexes and literals, no Huffman).
pub fn h2_get(stream: u32, path: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86]; // :method GET, :scheme http
    block.push(0x04); // :path, literal value, not indexed
    block.push(path.len() as u8);
    block.extend_from_slice(path.as_bytes());
    block.extend([0x01, 0x01, b'x']); // :authority x
    frame(1, 0x05, stream, &block) // END_STREAM | END_HEADERS
}

/// Reads frames, acknowledging SETTINGS and answering PINGs as a live
/// client would, until the server closes the connection (or `limit`
/// passes); returns how long that took and the `:status` HPACK bytes of
/// the responses seen.
pub fn h2_until_closed(s: &mut TcpStream, limit: Duration) -> (Duration, Vec<u8>) {
    let t = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut statuses = Vec::new();
    while t.elapsed() < limit {
        let mut head = [0u8; 1];
        match s.peek(&mut head) {
            Ok(0) => return (t.elapsed(), statuses),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
            Err(_) => return (t.elapsed(), statuses),
        }
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let Some((kind, flags, stream, payload)) = read_frame(s) else {
            return (t.elapsed(), statuses);
        };
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let reply = match (kind, flags & 1) {
            (4, 0) => Some(frame(4, 1, 0, &[])),      // SETTINGS: ack
            (6, 0) => Some(frame(6, 1, 0, &payload)), // PING: pong
            (1, _) if stream > 0 => {
                statuses.push(payload[0]);
                None
            }
            _ => None,
        };
        if let Some(r) = reply {
            if s.write_all(&r).is_err() {
                return (t.elapsed(), statuses);
            }
        }
    }
    (t.elapsed(), statuses)
}
