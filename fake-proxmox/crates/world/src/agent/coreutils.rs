//! The programs of the simulated guest (`shell::BUILTINS`): a few coreutils, `hostname`,
//! `cloud-init status`, `grep`, with GNU's messages and exit codes; `sh` is `shell`'s.

use super::guest_os::parent;
use super::shell::{Ran, STREAM_CAP, Shell};

impl Shell<'_> {
    /// One of `BUILTINS` with its arguments, as GNU coreutils (and dash's builtins) answer.
    pub(super) fn builtin(&mut self, prog: &str, args: &[String], stdin: &[u8]) -> Ran {
        let ok = |out: String| (0, out.into_bytes(), Vec::new());
        let fail = |code: i64, err: String| (code, Vec::new(), err.into_bytes());
        match prog {
            "true" | "sync" | "systemctl" => ok(String::new()),
            "false" => (1, Vec::new(), Vec::new()),
            "echo" => {
                let (nl, words) = match args.first().map(String::as_str) {
                    Some("-n") => (false, &args[1..]),
                    _ => (true, args),
                };
                let mut s = words.join(" ");
                if nl {
                    s.push('\n');
                }
                ok(s)
            }
            "printf" => {
                let fmt = args.first().cloned().unwrap_or_default();
                let mut rest = args.iter().skip(1);
                let mut s = String::new();
                let mut chars = fmt.chars().peekable();
                while let Some(c) = chars.next() {
                    match (c, chars.peek()) {
                        ('\\', Some('n')) => {
                            chars.next();
                            s.push('\n');
                        }
                        ('\\', Some('t')) => {
                            chars.next();
                            s.push('\t');
                        }
                        ('%', Some('s' | 'd')) => {
                            chars.next();
                            s.push_str(rest.next().map_or("", String::as_str));
                        }
                        _ => s.push(c),
                    }
                }
                ok(s)
            }
            "cat" => {
                if args.is_empty() {
                    return (0, stdin.to_vec(), Vec::new());
                }
                let (mut out, mut err, mut code) = (Vec::new(), Vec::new(), 0);
                for f in args {
                    if out.len() > STREAM_CAP {
                        break;
                    }
                    let p = self.abs(f);
                    match self.os.files.get(&p) {
                        Some(c) => out.extend_from_slice(c),
                        None if self.os.is_dir(&p) => {
                            err.extend(format!("cat: {f}: Is a directory\n").into_bytes());
                            code = 1;
                        }
                        None => {
                            err.extend(
                                format!("cat: {f}: No such file or directory\n").into_bytes(),
                            );
                            code = 1;
                        }
                    }
                }
                (code, out, err)
            }
            "tee" => {
                let append = args.iter().any(|a| a == "-a");
                for f in args.iter().filter(|a| !a.starts_with('-')) {
                    if let Err(why) = self.write(f, stdin, append) {
                        return fail(1, format!("tee: {f}: {why}\n"));
                    }
                }
                (0, stdin.to_vec(), Vec::new())
            }
            "hostname" => ok(format!("{}\n", self.hostname)),
            "sleep" => match args
                .first()
                .and_then(|a| a.trim_end_matches('s').parse::<f64>().ok())
            {
                Some(s) if s >= 0.0 => {
                    self.secs += s;
                    ok(String::new())
                }
                _ => fail(
                    1,
                    format!(
                        "sleep: invalid time interval '{}'\n",
                        args.first().map_or("", String::as_str)
                    ),
                ),
            },
            "test" | "[" => {
                let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
                if prog == "[" {
                    if a.last() != Some(&"]") {
                        return fail(2, "[: missing ]\n".into());
                    }
                    a.pop();
                }
                let negate = a.first() == Some(&"!");
                if negate {
                    a.remove(0);
                }
                let truth = match a.as_slice() {
                    [] => false,
                    ["-f", f] => self.os.files.contains_key(&self.abs(f)),
                    ["-d", f] => self.os.is_dir(&self.abs(f)),
                    ["-e", f] => {
                        let p = self.abs(f);
                        self.os.files.contains_key(&p) || self.os.is_dir(&p)
                    }
                    ["-x", f] => self.os.executable.contains(&self.abs(f)),
                    ["-s", f] => self
                        .os
                        .files
                        .get(&self.abs(f))
                        .is_some_and(|c| !c.is_empty()),
                    ["-n", s] => !s.is_empty(),
                    ["-z", s] => s.is_empty(),
                    [x, "=", y] => x == y,
                    [x, "!=", y] => x != y,
                    [s] => !s.is_empty(),
                    _ => return fail(2, format!("{prog}: unexpected operator\n")),
                };
                (i64::from(truth == negate), Vec::new(), Vec::new())
            }
            "mkdir" => {
                let parents = args.iter().any(|a| a == "-p");
                for d in args.iter().filter(|a| !a.starts_with('-')) {
                    let p = self.abs(d);
                    if self.os.is_dir(&p) {
                        if !parents {
                            return fail(
                                1,
                                format!("mkdir: cannot create directory ‘{d}’: File exists\n"),
                            );
                        }
                    } else if parents || self.os.is_dir(&parent(&p)) {
                        self.os.mkdir_all(&p);
                    } else {
                        return fail(
                            1,
                            format!(
                                "mkdir: cannot create directory ‘{d}’: No such file or directory\n"
                            ),
                        );
                    }
                }
                ok(String::new())
            }
            "touch" => {
                for f in args.iter().filter(|a| !a.starts_with('-')) {
                    let p = self.abs(f);
                    if !self.os.is_dir(&parent(&p)) {
                        return fail(
                            1,
                            format!("touch: cannot touch '{f}': No such file or directory\n"),
                        );
                    }
                    if !self.os.is_dir(&p) {
                        self.os.files.entry(p).or_default();
                    }
                }
                ok(String::new())
            }
            "rm" => {
                let force = args.iter().any(|a| a.starts_with('-') && a.contains('f'));
                let recursive = args
                    .iter()
                    .any(|a| a.starts_with('-') && (a.contains('r') || a.contains('R')));
                for f in args.iter().filter(|a| !a.starts_with('-')) {
                    let p = self.abs(f);
                    if self.os.files.remove(&p).is_some() {
                        self.os.executable.remove(&p);
                    } else if self.os.is_dir(&p) {
                        if !recursive {
                            return fail(1, format!("rm: cannot remove '{f}': Is a directory\n"));
                        }
                        let prefix = format!("{p}/");
                        self.os.files.retain(|k, _| !k.starts_with(&prefix));
                        self.os.dirs.retain(|k| k != &p && !k.starts_with(&prefix));
                    } else if !force {
                        return fail(
                            1,
                            format!("rm: cannot remove '{f}': No such file or directory\n"),
                        );
                    }
                }
                ok(String::new())
            }
            "chmod" => {
                let Some((mode, files)) = args.split_first() else {
                    return fail(1, "chmod: missing operand\n".into());
                };
                let exec = mode.contains('x')
                    || mode
                        .chars()
                        .last()
                        .and_then(|c| c.to_digit(8))
                        .is_some_and(|d| d & 1 == 1)
                    || mode.len() >= 3
                        && mode
                            .chars()
                            .nth(mode.len() - 3)
                            .and_then(|c| c.to_digit(8))
                            .is_some_and(|d| d & 1 == 1);
                let clear =
                    mode.starts_with("-") || mode.chars().all(|c| c.is_ascii_digit()) && !exec;
                for f in files {
                    let p = self.abs(f);
                    if !self.os.files.contains_key(&p) && !self.os.is_dir(&p) {
                        return fail(
                            1,
                            format!("chmod: cannot access '{f}': No such file or directory\n"),
                        );
                    }
                    if exec && !mode.starts_with('-') {
                        self.os.executable.insert(p);
                    } else if clear {
                        self.os.executable.remove(&p);
                    }
                }
                ok(String::new())
            }
            "ls" => {
                let paths: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
                let targets = if paths.is_empty() {
                    vec!["/".to_string()]
                } else {
                    paths.iter().map(|p| (*p).clone()).collect()
                };
                let (mut out, mut err, mut code) = (String::new(), String::new(), 0);
                for t in targets {
                    let p = self.abs(&t);
                    if self.os.files.contains_key(&p) {
                        out.push_str(&format!("{t}\n"));
                    } else if self.os.is_dir(&p) {
                        let prefix = if p == "/" {
                            "/".to_string()
                        } else {
                            format!("{p}/")
                        };
                        let mut names: Vec<&str> = self
                            .os
                            .files
                            .keys()
                            .chain(self.os.dirs.iter())
                            .filter_map(|k| k.strip_prefix(&prefix))
                            .filter(|rest| !rest.is_empty() && !rest.contains('/'))
                            .collect();
                        names.sort_unstable();
                        names.dedup();
                        for n in names {
                            out.push_str(n);
                            out.push('\n');
                        }
                    } else {
                        err.push_str(&format!(
                            "ls: cannot access '{t}': No such file or directory\n"
                        ));
                        code = 2;
                    }
                }
                (code, out.into_bytes(), err.into_bytes())
            }
            "id" => ok("uid=0(root) gid=0(root) groups=0(root)\n".into()),
            "whoami" => ok("root\n".into()),
            "pwd" => ok(format!("{}\n", self.cwd)),
            "apt-get" | "apt" => match args
                .iter()
                .find(|a| !a.starts_with('-'))
                .map(String::as_str)
            {
                Some("update") => ok("Reading package lists... Done\n".into()),
                Some("install" | "upgrade" | "remove" | "purge" | "autoremove") => ok(
                    "Reading package lists... Done\nBuilding dependency tree... Done\n\
                     Reading state information... Done\n"
                        .into(),
                ),
                _ => fail(100, "E: Invalid operation\n".into()),
            },
            "cp" | "mv" => {
                let paths: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
                let [src, dst] = paths.as_slice() else {
                    return fail(1, format!("{prog}: missing file operand\n"));
                };
                let from = self.abs(src);
                let Some(data) = self.os.files.get(&from).cloned() else {
                    return fail(
                        1,
                        format!("{prog}: cannot stat '{src}': No such file or directory\n"),
                    );
                };
                let mut to = self.abs(dst);
                if self.os.is_dir(&to) {
                    let base = from.rsplit('/').next().unwrap_or_default();
                    to = format!("{}/{base}", to.trim_end_matches('/'));
                }
                if !self.os.is_dir(&parent(&to)) {
                    return fail(
                        1,
                        format!(
                            "{prog}: cannot create regular file '{dst}': No such file or directory\n"
                        ),
                    );
                }
                if prog == "mv" {
                    self.os.files.remove(&from);
                    if self.os.executable.remove(&from) {
                        self.os.executable.insert(to.clone());
                    }
                }
                self.os.files.insert(to, data);
                ok(String::new())
            }
            "chown" | "ln" => ok(String::new()),
            "useradd" | "adduser" => {
                let Some(user) = args.iter().rfind(|a| !a.starts_with('-')) else {
                    return fail(2, format!("Usage: {prog} [options] LOGIN\n"));
                };
                let passwd = self.os.files.entry("/etc/passwd".into()).or_default();
                let text = String::from_utf8_lossy(passwd).into_owned();
                if text
                    .lines()
                    .any(|l| l.split(':').next() == Some(user.as_str()))
                {
                    return fail(9, format!("{prog}: user '{user}' already exists\n"));
                }
                let uid = 1000 + text.lines().count();
                passwd.extend(format!("{user}:x:{uid}:{uid}::/home/{user}:/bin/sh\n").into_bytes());
                ok(String::new())
            }
            "basename" => ok(format!(
                "{}\n",
                args.first().map_or("", |a| a
                    .trim_end_matches('/')
                    .rsplit('/')
                    .next()
                    .unwrap_or(""))
            )),
            "dirname" => ok(format!(
                "{}\n",
                args.first().map_or(".".into(), |a| parent(a))
            )),
            "wc" => {
                let data = match args.iter().find(|a| !a.starts_with('-')) {
                    Some(f) => match self.os.files.get(&self.abs(f)) {
                        Some(c) => c.clone(),
                        None => return fail(1, format!("wc: {f}: No such file or directory\n")),
                    },
                    None => stdin.to_vec(),
                };
                let n = if args.iter().any(|a| a == "-c") {
                    data.len()
                } else {
                    data.iter().filter(|&&b| b == b'\n').count()
                };
                ok(format!("{n}\n"))
            }
            "env" => {
                ok("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n".into())
            }
            "uname" => {
                let s = match args.first().map(String::as_str) {
                    Some("-r") => "5.15.0-131-generic".to_string(),
                    Some("-n") => self.hostname.to_string(),
                    Some("-m") => "x86_64".into(),
                    Some("-a") => format!(
                        "Linux {} 5.15.0-131-generic #141-Ubuntu SMP x86_64 x86_64 x86_64 GNU/Linux",
                        self.hostname
                    ),
                    _ => "Linux".into(),
                };
                ok(format!("{s}\n"))
            }
            "cloud-init" => match args.first().map(String::as_str) {
                Some("status") => ok("status: done\n".into()),
                _ => fail(
                    2,
                    "usage: cloud-init [-h] [--version] [--debug] [--force] ...\n".into(),
                ),
            },
            "grep" => {
                let quiet = args.iter().any(|a| a == "-q");
                let mut rest = args.iter().filter(|a| !a.starts_with('-'));
                let Some(pattern) = rest.next() else {
                    return fail(2, "Usage: grep [OPTION]... PATTERNS [FILE]...\n".into());
                };
                let text = match rest.next() {
                    Some(f) => match self.os.files.get(&self.abs(f)) {
                        Some(c) => c.clone(),
                        None => return fail(2, format!("grep: {f}: No such file or directory\n")),
                    },
                    None => stdin.to_vec(),
                };
                let text = String::from_utf8_lossy(&text);
                let hits: String = text
                    .lines()
                    .filter(|l| l.contains(pattern.as_str()))
                    .map(|l| format!("{l}\n"))
                    .collect();
                let code = i64::from(hits.is_empty());
                (
                    code,
                    if quiet { Vec::new() } else { hits.into_bytes() },
                    Vec::new(),
                )
            }
            // sh, bash, dash
            _ => self.sh(prog, args, stdin),
        }
    }
}
