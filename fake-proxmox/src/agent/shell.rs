//! What a simulated guest runs for `guest-exec`: scripted results first, then a small set of
//! coreutils and a `sh` that knows simple scripts (`;`, `&&`, `||`, `|`, `>`, `>>`, `<`,
//! `2>&1`, quotes, `exit`, `set -e`), enough for post-provisioning scripts. A program that
//! does not exist fails the spawn itself, as GLib's does in qemu-ga; inside `sh` it is dash's
//! `not found` and exit 127.

use super::guest_os::{EXEC_MAX_OUTPUT, GuestOs, normal_path, parent};

/// How a process ended and what it printed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    pub exitcode: i64,
    pub signal: Option<i64>,
    pub out: Vec<u8>,
    pub err: Vec<u8>,
    /// Simulated seconds it ran (`sleep`, scripted durations).
    pub secs: f64,
}

/// The programs the simulated guest has (`coreutils`), found on `PATH` or in `BIN_DIRS`.
const BUILTINS: &[&str] = &[
    "true",
    "false",
    "echo",
    "printf",
    "cat",
    "hostname",
    "sleep",
    "test",
    "[",
    "mkdir",
    "touch",
    "rm",
    "chmod",
    "ls",
    "tee",
    "id",
    "whoami",
    "uname",
    "cloud-init",
    "systemctl",
    "sync",
    "grep",
    "sh",
    "bash",
    "dash",
    "env",
    "pwd",
];
const BIN_DIRS: &[&str] = &["/bin", "/usr/bin", "/sbin", "/usr/sbin", "/usr/local/bin"];

enum Program {
    Builtin(String),
    Script(String, Vec<u8>),
}

enum Missing {
    NotFound,
    NotExecutable,
}

fn resolve(os: &GuestOs, name: &str) -> Result<Program, Missing> {
    if !name.contains('/') {
        return if BUILTINS.contains(&name) {
            Ok(Program::Builtin(name.into()))
        } else {
            Err(Missing::NotFound)
        };
    }
    let p = normal_path(name);
    let dir = parent(&p);
    let base = p.rsplit('/').next().unwrap_or_default();
    if BIN_DIRS.contains(&dir.as_str()) && BUILTINS.contains(&base) {
        return Ok(Program::Builtin(base.into()));
    }
    match os.files.get(&p) {
        None => Err(Missing::NotFound),
        Some(_) if !os.executable.contains(&p) => Err(Missing::NotExecutable),
        Some(body) => Ok(Program::Script(p.clone(), body.clone())),
    }
}

/// `guest-exec` of `argv` with `stdin`: `Err` is GLib's spawn failure text.
pub fn spawn(
    os: &mut GuestOs,
    hostname: &str,
    argv: &[String],
    stdin: &[u8],
) -> Result<Outcome, String> {
    let Some(program) = argv.first() else {
        return Err("Failed to execute child process “” (No such file or directory)".into());
    };
    let mut sh = Shell {
        os,
        hostname,
        secs: 0.0,
        depth: 0,
    };
    if let Some(o) = sh.scripted(argv) {
        return Ok(o);
    }
    let (code, out, err) = match resolve(sh.os, program) {
        Ok(Program::Builtin(b)) => sh.builtin(&b, &argv[1..], stdin),
        Ok(Program::Script(path, body)) => {
            let text = String::from_utf8_lossy(&body).into_owned();
            sh.script(&text, &path, stdin, false)
        }
        Err(Missing::NotFound) => {
            return Err(format!(
                "Failed to execute child process “{program}” (No such file or directory)"
            ));
        }
        Err(Missing::NotExecutable) => {
            return Err(format!(
                "Failed to execute child process “{program}” (Permission denied)"
            ));
        }
    };
    Ok(Outcome {
        exitcode: code,
        signal: None,
        out,
        err,
        secs: sh.secs,
    })
}

/// Exit code, stdout, stderr of a command.
pub(super) type Ran = (i64, Vec<u8>, Vec<u8>);

pub(super) struct Shell<'a> {
    pub(super) os: &'a mut GuestOs,
    pub(super) hostname: &'a str,
    pub(super) secs: f64,
    /// Scripts running scripts: bounded, as a guest's process table is.
    depth: u32,
}

/// How deep scripts may run scripts before the guest cannot fork any more.
const MAX_DEPTH: u32 = 16;
/// What one stream keeps: more than qemu-ga captures is never needed.
pub(super) const STREAM_CAP: usize = EXEC_MAX_OUTPUT + 1;
/// The largest file the guest's disk takes.
pub(super) const FILE_CAP: usize = 64 * 1024 * 1024;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Word(String),
    Op(&'static str),
}

fn tokenize(line: &str) -> Vec<Tok> {
    let mut toks = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let cs: Vec<char> = line.chars().collect();
    let mut i = 0;
    let flush = |cur: &mut String, in_word: &mut bool, toks: &mut Vec<Tok>| {
        if *in_word {
            toks.push(Tok::Word(std::mem::take(cur)));
            *in_word = false;
        }
    };
    while i < cs.len() {
        let c = cs[i];
        let rest: String = cs[i..].iter().take(4).collect();
        match c {
            '\'' => {
                in_word = true;
                i += 1;
                while i < cs.len() && cs[i] != '\'' {
                    cur.push(cs[i]);
                    i += 1;
                }
            }
            '"' => {
                in_word = true;
                i += 1;
                while i < cs.len() && cs[i] != '"' {
                    if cs[i] == '\\' && i + 1 < cs.len() && matches!(cs[i + 1], '"' | '\\' | '$') {
                        i += 1;
                    }
                    cur.push(cs[i]);
                    i += 1;
                }
            }
            '\\' if i + 1 < cs.len() => {
                in_word = true;
                cur.push(cs[i + 1]);
                i += 1;
            }
            '#' if !in_word => break,
            ' ' | '\t' => flush(&mut cur, &mut in_word, &mut toks),
            _ => {
                let op = ["2>&1", "&&", "||", ">>", "2>", ";", "|", ">", "<"]
                    .into_iter()
                    .find(|op| rest.starts_with(op) && (!op.starts_with('2') || !in_word));
                match op {
                    Some(op) => {
                        flush(&mut cur, &mut in_word, &mut toks);
                        toks.push(Tok::Op(op));
                        i += op.len() - 1;
                    }
                    None => {
                        in_word = true;
                        cur.push(c);
                    }
                }
            }
        }
        i += 1;
    }
    flush(&mut cur, &mut in_word, &mut toks);
    toks
}

/// Where a command's streams go.
#[derive(Default)]
struct Redirs {
    out: Option<(String, bool)>,
    err: Option<(String, bool)>,
    err_to_out: bool,
    input: Option<String>,
}

impl Shell<'_> {
    fn scripted(&mut self, argv: &[String]) -> Option<Outcome> {
        let s = self.os.script_for(argv)?.clone();
        self.secs += s.secs;
        Some(Outcome {
            exitcode: s.exitcode,
            signal: s.signal,
            out: s.out.into_bytes(),
            err: s.err.into_bytes(),
            secs: s.secs,
        })
    }

    /// Run a script as dash does; `name` is `$0` in its messages.
    fn script(&mut self, text: &str, name: &str, stdin: &[u8], errexit: bool) -> Ran {
        if self.depth >= MAX_DEPTH {
            return (
                2,
                Vec::new(),
                format!("{name}: 0: Cannot fork\n").into_bytes(),
            );
        }
        self.depth += 1;
        let ran = self.run_script(text, name, stdin, errexit);
        self.depth -= 1;
        ran
    }

    fn run_script(&mut self, text: &str, name: &str, stdin: &[u8], errexit: bool) -> Ran {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut status = 0;
        let mut errexit = errexit;
        for (n, line) in text.lines().enumerate() {
            let toks = tokenize(line);
            let mut i = 0;
            let mut skip = false;
            while i < toks.len() {
                let end = toks[i..]
                    .iter()
                    .position(|t| matches!(t, Tok::Op(";" | "&&" | "||")))
                    .map_or(toks.len(), |p| i + p);
                let pipeline = &toks[i..end];
                if !skip && !pipeline.is_empty() {
                    if let [Tok::Word(w), rest @ ..] = pipeline
                        && w == "exit"
                    {
                        let code = match rest.first() {
                            Some(Tok::Word(c)) => c.parse().unwrap_or(2),
                            _ => status,
                        };
                        return (code, out, err);
                    }
                    if let [Tok::Word(w), Tok::Word(f)] = pipeline
                        && w == "set"
                        && f.starts_with('-')
                    {
                        errexit |= f.contains('e');
                    } else {
                        let (c, o, e) = self.pipeline(pipeline, stdin, name, n + 1);
                        status = c;
                        out.extend(o);
                        err.extend(e);
                        out.truncate(STREAM_CAP);
                        err.truncate(STREAM_CAP);
                        if errexit
                            && status != 0
                            && !matches!(toks.get(end), Some(Tok::Op("||" | "&&")))
                        {
                            return (status, out, err);
                        }
                    }
                }
                skip = match toks.get(end) {
                    Some(Tok::Op("&&")) => status != 0,
                    Some(Tok::Op("||")) => status == 0,
                    _ => false,
                };
                i = end + 1;
            }
        }
        (status, out, err)
    }

    fn pipeline(&mut self, toks: &[Tok], stdin: &[u8], name: &str, line: usize) -> Ran {
        let mut input = stdin.to_vec();
        let mut err = Vec::new();
        let mut status = 0;
        let parts: Vec<&[Tok]> = toks.split(|t| *t == Tok::Op("|")).collect();
        let last = parts.len() - 1;
        let mut out = Vec::new();
        for (k, part) in parts.into_iter().enumerate() {
            let (c, o, e) = self.command(part, &input, name, line);
            status = c;
            err.extend(e);
            if k == last {
                out = o;
            } else {
                input = o;
            }
        }
        (status, out, err)
    }

    fn command(&mut self, toks: &[Tok], stdin: &[u8], name: &str, line: usize) -> Ran {
        let mut argv = Vec::new();
        let mut r = Redirs::default();
        let mut it = toks.iter();
        while let Some(t) = it.next() {
            match t {
                Tok::Word(w) => argv.push(w.clone()),
                Tok::Op("2>&1") => r.err_to_out = true,
                Tok::Op(op) => {
                    let Some(Tok::Word(target)) = it.next() else {
                        let msg = format!("{name}: {line}: Syntax error: redirection unexpected\n");
                        return (2, Vec::new(), msg.into_bytes());
                    };
                    match *op {
                        ">" => r.out = Some((target.clone(), false)),
                        ">>" => r.out = Some((target.clone(), true)),
                        "2>" => r.err = Some((target.clone(), false)),
                        _ => r.input = Some(target.clone()),
                    }
                }
            }
        }
        let input = match &r.input {
            Some(f) => match self.os.files.get(&normal_path(f)) {
                Some(c) => c.clone(),
                None => {
                    let msg = format!("{name}: {line}: cannot open {f}: No such file\n");
                    return (2, Vec::new(), msg.into_bytes());
                }
            },
            None => stdin.to_vec(),
        };
        let (code, mut out, mut err) = match argv.first() {
            None => (0, Vec::new(), Vec::new()),
            Some(prog) => match self.scripted(&argv) {
                Some(o) => (o.exitcode, o.out, o.err),
                None => match resolve(self.os, prog) {
                    Ok(Program::Builtin(b)) => self.builtin(&b, &argv[1..], &input),
                    Ok(Program::Script(path, body)) => {
                        let text = String::from_utf8_lossy(&body).into_owned();
                        self.script(&text, &path, &input, false)
                    }
                    Err(Missing::NotFound) => (
                        127,
                        Vec::new(),
                        format!("{name}: {line}: {prog}: not found\n").into_bytes(),
                    ),
                    Err(Missing::NotExecutable) => (
                        126,
                        Vec::new(),
                        format!("{name}: {line}: {prog}: Permission denied\n").into_bytes(),
                    ),
                },
            },
        };
        if r.err_to_out {
            out.append(&mut err);
        }
        out.truncate(STREAM_CAP);
        err.truncate(STREAM_CAP);
        for (target, stream) in [(&r.out, &mut out), (&r.err, &mut err)] {
            if let Some((file, append)) = target {
                let data = std::mem::take(stream);
                if let Err(why) = self.write(file, &data, *append) {
                    let msg = format!("{name}: {line}: cannot create {file}: {why}\n");
                    return (2, Vec::new(), msg.into_bytes());
                }
            }
        }
        (code, out, err)
    }

    pub(super) fn write(
        &mut self,
        file: &str,
        data: &[u8],
        append: bool,
    ) -> Result<(), &'static str> {
        if file == "/dev/null" {
            return Ok(());
        }
        let p = normal_path(file);
        if self.os.is_dir(&p) {
            return Err("Is a directory");
        }
        if !self.os.is_dir(&parent(&p)) {
            return Err("Directory nonexistent");
        }
        let kept = if append {
            self.os.files.get(&p).map_or(0, Vec::len)
        } else {
            0
        };
        if kept + data.len() > FILE_CAP {
            return Err("No space left on device");
        }
        let f = self.os.files.entry(p).or_default();
        if !append {
            f.clear();
        }
        f.extend_from_slice(data);
        Ok(())
    }

    /// `sh`/`bash`/`dash`: `-e`, `-c SCRIPT [NAME]`, a script file, or the script on stdin.
    pub(super) fn sh(&mut self, prog: &str, args: &[String], stdin: &[u8]) -> Ran {
        let mut errexit = false;
        let mut i = 0;
        while let Some(a) = args.get(i) {
            match a.as_str() {
                "-e" => errexit = true,
                "-c" => {
                    let Some(script) = args.get(i + 1) else {
                        return (
                            2,
                            Vec::new(),
                            format!("{prog}: 0: -c requires an argument\n").into_bytes(),
                        );
                    };
                    let name = args.get(i + 2).map_or(prog, String::as_str).to_string();
                    return self.script(script, &name, stdin, errexit);
                }
                _ => break,
            }
            i += 1;
        }
        match args.get(i) {
            Some(file) => match self.os.files.get(&normal_path(file)) {
                Some(body) => {
                    let text = String::from_utf8_lossy(body).into_owned();
                    self.script(&text, file, stdin, errexit)
                }
                None => (
                    if prog == "bash" { 127 } else { 2 },
                    Vec::new(),
                    format!("{prog}: 0: cannot open {file}: No such file\n").into_bytes(),
                ),
            },
            None => {
                let text = String::from_utf8_lossy(stdin).into_owned();
                self.script(&text, prog, &[], errexit)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn run(os: &mut GuestOs, argv: &[&str]) -> Result<Outcome, String> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        spawn(os, "web1", &argv, b"")
    }

    fn guest() -> GuestOs {
        let mut g = GuestOs::default();
        g.seed("web1", &Default::default());
        g
    }

    #[test]
    fn a_shell_line_with_redirects_and_lists() {
        let mut g = guest();
        let o = run(
            &mut g,
            &[
                "sh",
                "-c",
                "echo a > /tmp/f && echo b >> /tmp/f; cat /tmp/f | grep b",
            ],
        )
        .unwrap();
        assert_eq!((o.exitcode, o.out.as_slice()), (0, b"b\n".as_slice()));
        assert_eq!(g.files["/tmp/f"], b"a\nb\n");
        let o = run(&mut g, &["sh", "-c", "false || echo 'fell back'"]).unwrap();
        assert_eq!(o.out, b"fell back\n");
    }

    #[test]
    fn unknown_programs_fail_the_spawn_or_exit_127_in_sh() {
        let mut g = guest();
        assert_eq!(
            run(&mut g, &["nope"]).unwrap_err(),
            "Failed to execute child process “nope” (No such file or directory)"
        );
        let o = run(&mut g, &["/bin/sh", "-c", "nope --x"]).unwrap();
        assert_eq!(
            (o.exitcode, o.err.as_slice()),
            (127, b"sh: 1: nope: not found\n".as_slice())
        );
    }

    #[test]
    fn a_written_script_runs_through_sh_or_once_executable() {
        let mut g = guest();
        g.files.insert(
            "/root/setup.sh".into(),
            b"#!/bin/sh\nset -e\necho start\nmkdir -p /opt/app\nmissing-tool\necho never\n"
                .to_vec(),
        );
        let o = run(&mut g, &["/bin/sh", "/root/setup.sh"]).unwrap();
        assert_eq!(o.exitcode, 127);
        assert_eq!(o.out, b"start\n");
        assert_eq!(o.err, b"/root/setup.sh: 5: missing-tool: not found\n");
        assert!(g.is_dir("/opt/app"));
        assert_eq!(
            run(&mut g, &["/root/setup.sh"]).unwrap_err(),
            "Failed to execute child process “/root/setup.sh” (Permission denied)"
        );
        run(&mut g, &["chmod", "+x", "/root/setup.sh"]).unwrap();
        assert_eq!(run(&mut g, &["/root/setup.sh"]).unwrap().exitcode, 127);
    }

    #[test]
    fn a_script_running_itself_stops_at_the_fork_limit() {
        let mut g = guest();
        g.files
            .insert("/root/loop.sh".into(), b"sh /root/loop.sh\n".to_vec());
        let o = run(&mut g, &["sh", "/root/loop.sh"]).unwrap();
        assert_eq!(o.exitcode, 2);
        assert!(String::from_utf8_lossy(&o.err).ends_with("Cannot fork\n"));
    }

    #[test]
    fn sleep_takes_simulated_time_and_exit_ends_the_script() {
        let mut g = guest();
        let o = run(&mut g, &["bash", "-c", "sleep 5; exit 3; echo no"]).unwrap();
        assert_eq!((o.exitcode, o.secs, o.out.len()), (3, 5.0, 0));
    }
}
