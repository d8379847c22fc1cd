//! Expansion in the simulated guest's `sh`: `$NAME`, `${NAME}`, `$?`, `$$`, `$0`, and `$(…)`
//! command substitution (its trailing newlines dropped, its stderr passed on). No field
//! splitting: an expansion stays one word.

use super::sh_parse::{Piece, Word};
use super::shell::{Shell, append};

impl Shell<'_> {
    /// Expand `$…` in a word; the result is one word (no field splitting).
    pub(super) fn expand_word(&mut self, w: &Word, name: &str) -> String {
        let mut s = String::new();
        for piece in w {
            match piece {
                Piece::Lit(t) => s.push_str(t),
                Piece::Exp(t) => {
                    let e = self.expand(t, name);
                    s.push_str(&e);
                }
            }
        }
        s
    }

    fn expand(&mut self, text: &str, name: &str) -> String {
        let cs: Vec<char> = text.chars().collect();
        let mut out = String::new();
        let mut i = 0;
        while i < cs.len() {
            if cs[i] != '$' || i + 1 >= cs.len() {
                out.push(cs[i]);
                i += 1;
                continue;
            }
            let next = cs[i + 1];
            match next {
                '?' => {
                    out.push_str(&self.status.to_string());
                    i += 2;
                }
                '$' => {
                    out.push_str("1733");
                    i += 2;
                }
                '0' => {
                    out.push_str(name);
                    i += 2;
                }
                '1'..='9' | '#' | '@' | '*' => {
                    if next == '#' {
                        out.push('0');
                    }
                    i += 2;
                }
                '{' => {
                    let end = cs[i..]
                        .iter()
                        .position(|&c| c == '}')
                        .map_or(cs.len(), |p| i + p);
                    let key: String = cs[i + 2..end].iter().collect();
                    let key = key.split([':', '-']).next().unwrap_or_default().to_string();
                    out.push_str(self.vars.get(&key).map_or("", String::as_str));
                    i = end + 1;
                }
                '(' => {
                    let mut depth = 0;
                    let mut end = cs.len();
                    for (j, &c) in cs.iter().enumerate().skip(i + 1) {
                        match c {
                            '(' => depth += 1,
                            ')' => {
                                depth -= 1;
                                if depth == 0 {
                                    end = j;
                                    break;
                                }
                            }
                            _ => {}
                        }
                    }
                    let inner: String = cs[(i + 2).min(end)..end].iter().collect();
                    let (c, o, e) = self.script(&inner, name, &[], false);
                    self.status = c;
                    append(&mut self.sub_err, &e);
                    out.push_str(String::from_utf8_lossy(&o).trim_end_matches('\n'));
                    i = end + 1;
                }
                c if c.is_ascii_alphabetic() || c == '_' => {
                    let len = cs[i + 1..]
                        .iter()
                        .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                        .count();
                    let key: String = cs[i + 1..i + 1 + len].iter().collect();
                    out.push_str(self.vars.get(&key).map_or("", String::as_str));
                    i += 1 + len;
                }
                _ => {
                    out.push('$');
                    i += 1;
                }
            }
        }
        out
    }
}
