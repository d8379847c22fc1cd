//! What a simulated guest runs for `guest-exec`: scripted results first, then a small set of
//! coreutils and a `sh` (grammar in `sh_parse`: lists, pipelines, redirections, quotes,
//! variables, `$?`, `$(…)`, `if`, `for`; builtins `exit`, `set -e`, `export`, `cd`, `.`),
//! enough for post-provisioning scripts. A program that does not exist fails the spawn
//! itself, as GLib's does in qemu-ga; inside `sh` it is dash's `not found` and exit 127.
//! Not modelled: `while`/`case`/functions, field splitting of expansions, globs, background
//! jobs.

use std::collections::BTreeMap;

use super::guest_os::{EXEC_MAX_OUTPUT, FILE_CAP, GuestOs, normal_path, parent};
use super::sh_parse::{Node, Word, parse};

/// How a process ended and what it printed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// Exit code (meaningless when `signal` is set).
    pub exitcode: i64,
    /// The signal that killed it, if one did.
    pub signal: Option<i64>,
    /// Standard output.
    pub out: Vec<u8>,
    /// Standard error.
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
    "apt-get",
    "apt",
    "cp",
    "mv",
    "chown",
    "ln",
    "useradd",
    "adduser",
    "basename",
    "dirname",
    "wc",
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
    let mut sh = Shell::new(os, hostname);
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
    /// Commands run so far: bounded, so no script holds the site for long.
    steps: u32,
    pub(super) vars: BTreeMap<String, String>,
    /// `$?`.
    pub(super) status: i64,
    /// `exit N` ran: the script ends with N.
    exiting: Option<i64>,
    errexit: bool,
    pub(super) cwd: String,
    /// What command substitutions wrote to stderr (it goes to the command's stderr).
    pub(super) sub_err: Vec<u8>,
}

/// How deep scripts may run scripts before the guest cannot fork any more.
const MAX_DEPTH: u32 = 16;
/// What one stream keeps: more than qemu-ga captures is never needed.
pub(super) const STREAM_CAP: usize = EXEC_MAX_OUTPUT + 1;
/// The most commands one `guest-exec` runs.
const MAX_STEPS: u32 = 20_000;
/// The most iterations a `for` runs over (its words come from a command line).
const MAX_LOOP: usize = 10_000;

impl<'a> Shell<'a> {
    fn new(os: &'a mut GuestOs, hostname: &'a str) -> Shell<'a> {
        let vars = [
            (
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            ),
            ("PWD", "/"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        Shell {
            os,
            hostname,
            secs: 0.0,
            depth: 0,
            steps: 0,
            vars,
            status: 0,
            exiting: None,
            errexit: false,
            cwd: "/".into(),
            sub_err: Vec::new(),
        }
    }
}

/// Add `more` to a stream, keeping at most `STREAM_CAP`.
pub(super) fn append(into: &mut Vec<u8>, more: &[u8]) {
    let room = STREAM_CAP.saturating_sub(into.len());
    into.extend_from_slice(&more[..more.len().min(room)]);
}

impl Shell<'_> {
    /// `p` made absolute against the working directory.
    pub(super) fn abs(&self, p: &str) -> String {
        if p.starts_with('/') {
            normal_path(p)
        } else {
            normal_path(&format!("{}/{p}", self.cwd))
        }
    }

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
    pub(super) fn script(&mut self, text: &str, name: &str, stdin: &[u8], errexit: bool) -> Ran {
        if self.depth >= MAX_DEPTH {
            return (
                2,
                Vec::new(),
                format!("{name}: 0: Cannot fork\n").into_bytes(),
            );
        }
        let tree = match parse(text) {
            Ok(t) => t,
            Err(e) => {
                let msg = format!("{name}: {}: Syntax error: {}\n", e.line, e.msg);
                return (2, Vec::new(), msg.into_bytes());
            }
        };
        self.depth += 1;
        let saved = (self.errexit, self.exiting.take());
        self.errexit = errexit;
        let (mut code, out, err) = self.run(&tree, stdin, name);
        if let Some(c) = self.exiting.take() {
            code = c;
        }
        (self.errexit, self.exiting) = saved;
        self.depth -= 1;
        self.status = code;
        (code, out, err)
    }

    fn run(&mut self, node: &Node, stdin: &[u8], name: &str) -> Ran {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = match node {
            Node::List(items) => {
                let mut code = 0;
                for item in items {
                    let (c, o, e) = self.run(item, stdin, name);
                    append(&mut out, &o);
                    append(&mut err, &e);
                    code = c;
                    if self.exiting.is_some() {
                        break;
                    }
                    if self.errexit
                        && c != 0
                        && !matches!(item, Node::AndOr(_, rest) if !rest.is_empty())
                    {
                        self.exiting = Some(c);
                        break;
                    }
                }
                code
            }
            Node::AndOr(first, rest) => {
                let (mut code, o, e) = self.run(first, stdin, name);
                append(&mut out, &o);
                append(&mut err, &e);
                for (op, next) in rest {
                    if self.exiting.is_some() || (*op == "&&") != (code == 0) {
                        continue;
                    }
                    let (c, o, e) = self.run(next, stdin, name);
                    append(&mut out, &o);
                    append(&mut err, &e);
                    code = c;
                }
                code
            }
            Node::Pipeline(cmds) => {
                let mut input = stdin.to_vec();
                let mut code = 0;
                let last = cmds.len().saturating_sub(1);
                for (k, cmd) in cmds.iter().enumerate() {
                    let (c, o, e) = self.run(cmd, &input, name);
                    append(&mut err, &e);
                    code = c;
                    if k == last {
                        out = o;
                    } else {
                        input = o;
                    }
                }
                code
            }
            Node::If {
                branches,
                otherwise,
            } => {
                let mut chosen = otherwise.as_deref();
                for (cond, body) in branches {
                    // A failing condition does not trip `set -e`.
                    let errexit = std::mem::replace(&mut self.errexit, false);
                    let (c, o, e) = self.run(cond, stdin, name);
                    self.errexit = errexit;
                    append(&mut out, &o);
                    append(&mut err, &e);
                    if self.exiting.is_some() {
                        chosen = None;
                        break;
                    }
                    if c == 0 {
                        chosen = Some(body);
                        break;
                    }
                }
                match chosen {
                    Some(body) => {
                        let (c, o, e) = self.run(body, stdin, name);
                        append(&mut out, &o);
                        append(&mut err, &e);
                        c
                    }
                    None => 0,
                }
            }
            Node::For { var, items, body } => {
                let mut values = Vec::new();
                for w in items {
                    let v = self.expand_word(w, name);
                    values.extend(v.split_whitespace().map(str::to_string));
                }
                let mut code = 0;
                for v in values.into_iter().take(MAX_LOOP) {
                    self.vars.insert(var.clone(), v);
                    let (c, o, e) = self.run(body, stdin, name);
                    append(&mut out, &o);
                    append(&mut err, &e);
                    code = c;
                    if self.exiting.is_some() {
                        break;
                    }
                }
                code
            }
            Node::Simple {
                words,
                redirs,
                line,
            } => return self.simple(words, redirs, *line, stdin, name),
        };
        self.status = code;
        (code, out, err)
    }

    fn simple(
        &mut self,
        words: &[Word],
        redirs: &[(&'static str, Word)],
        line: usize,
        stdin: &[u8],
        name: &str,
    ) -> Ran {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            let msg = format!("{name}: {line}: Cannot fork\n");
            return (2, Vec::new(), msg.into_bytes());
        }
        self.sub_err.clear();
        let mut argv: Vec<String> = words.iter().map(|w| self.expand_word(w, name)).collect();
        // Leading `NAME=value`: alone they set shell variables; before a command, only its
        // environment (not modelled).
        let assigns = argv.iter().take_while(|a| is_assignment(a)).count();
        if assigns == argv.len() {
            for a in &argv {
                if let Some((k, v)) = a.split_once('=') {
                    self.vars.insert(k.into(), v.into());
                }
            }
        }
        argv.drain(..assigns);
        let mut input = stdin.to_vec();
        let mut targets = Vec::new();
        let mut err_to_out = false;
        for (op, target) in redirs {
            let t = self.expand_word(target, name);
            match *op {
                "2>&1" => err_to_out = true,
                "<" => match self.os.files.get(&self.abs(&t)) {
                    Some(c) => input = c.clone(),
                    None => {
                        let msg = format!("{name}: {line}: cannot open {t}: No such file\n");
                        return (2, Vec::new(), msg.into_bytes());
                    }
                },
                op => targets.push((op, t)),
            }
        }
        let (code, mut out, mut err) = match argv.first() {
            None => (0, Vec::new(), Vec::new()),
            Some(_) => self.invoke(&argv, &input, line, name),
        };
        let mut all_err = std::mem::take(&mut self.sub_err);
        append(&mut all_err, &err);
        err = all_err;
        if err_to_out {
            append(&mut out, &err);
            err.clear();
        }
        for (op, file) in targets {
            let data = if op == "2>" {
                std::mem::take(&mut err)
            } else {
                std::mem::take(&mut out)
            };
            if let Err(why) = self.write(&file, &data, op == ">>") {
                let msg = format!("{name}: {line}: cannot create {file}: {why}\n");
                return (2, Vec::new(), msg.into_bytes());
            }
        }
        self.status = code;
        (code, out, err)
    }

    /// One command: the shell's own builtins, a scripted result, a program, a script file.
    fn invoke(&mut self, argv: &[String], input: &[u8], line: usize, name: &str) -> Ran {
        let prog = argv[0].as_str();
        let args = &argv[1..];
        match prog {
            "exit" => {
                let code = args.first().map_or(self.status, |c| c.parse().unwrap_or(2));
                self.exiting = Some(code);
                return (code, Vec::new(), Vec::new());
            }
            "set" => {
                for a in args {
                    if a.starts_with('-') && !a.starts_with("--") && a.contains('e') {
                        self.errexit = true;
                    } else if a.starts_with('+') && a.contains('e') {
                        self.errexit = false;
                    }
                }
                return (0, Vec::new(), Vec::new());
            }
            "export" | "readonly" | "local" => {
                for a in args.iter().filter(|a| is_assignment(a)) {
                    if let Some((k, v)) = a.split_once('=') {
                        self.vars.insert(k.into(), v.into());
                    }
                }
                return (0, Vec::new(), Vec::new());
            }
            "unset" => {
                for a in args {
                    self.vars.remove(a);
                }
                return (0, Vec::new(), Vec::new());
            }
            "cd" => {
                let target = args.first().map_or("/root".to_string(), |d| self.abs(d));
                if !self.os.is_dir(&target) {
                    let d = args.first().map_or("", String::as_str);
                    let msg = format!("{name}: {line}: cd: can't cd to {d}\n");
                    return (2, Vec::new(), msg.into_bytes());
                }
                self.vars.insert("PWD".into(), target.clone());
                self.cwd = target;
                return (0, Vec::new(), Vec::new());
            }
            ":" | "umask" | "trap" | "shift" | "wait" => return (0, Vec::new(), Vec::new()),
            "." | "source" => {
                let Some(f) = args.first() else {
                    return (
                        2,
                        Vec::new(),
                        format!("{name}: {line}: .: not enough arguments\n").into_bytes(),
                    );
                };
                return match self.os.files.get(&self.abs(f)).cloned() {
                    Some(body) => {
                        let tree = parse(&String::from_utf8_lossy(&body));
                        match tree {
                            Ok(t) => self.run(&t, input, name),
                            Err(e) => (
                                2,
                                Vec::new(),
                                format!("{f}: {}: Syntax error: {}\n", e.line, e.msg).into_bytes(),
                            ),
                        }
                    }
                    None => (
                        2,
                        Vec::new(),
                        format!("{name}: {line}: .: cannot open {f}: No such file\n").into_bytes(),
                    ),
                };
            }
            _ => {}
        }
        if let Some(o) = self.scripted(argv) {
            return (o.exitcode, o.out, o.err);
        }
        let resolved = if prog.contains('/') && !prog.starts_with('/') {
            resolve(self.os, &self.abs(prog))
        } else {
            resolve(self.os, prog)
        };
        match resolved {
            Ok(Program::Builtin(b)) => self.builtin(&b, args, input),
            Ok(Program::Script(path, body)) => {
                let text = String::from_utf8_lossy(&body).into_owned();
                self.script(&text, &path, input, false)
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
        }
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
        let p = self.abs(file);
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
                a if a.starts_with('-') => errexit |= a.contains('e'),
                _ => break,
            }
            i += 1;
        }
        match args.get(i) {
            Some(file) => match self.os.files.get(&self.abs(file)) {
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

fn is_assignment(a: &str) -> bool {
    a.split_once('=').is_some_and(|(k, _)| {
        !k.is_empty()
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !k.starts_with(|c: char| c.is_ascii_digit())
    })
}

#[cfg(test)]
#[path = "shell_tests.rs"]
mod tests;
