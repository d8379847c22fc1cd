//! The simulated guest's `sh` grammar: words (quotes, `\`, `$VAR`, `${VAR}`, `$?`, `$(…)`),
//! operators (`;`, newline, `&&`, `||`, `|`, `>`, `>>`, `2>`, `2>&1`, `<`), and the compound
//! commands scripts use most (`if … then … elif … else … fi`, `for … in …; do … done`).
//! Expansion happens when a command runs (`shell`), so `$?` sees the command before it.

/// A piece of a word: literal text (quoted), or text whose `$…` expand.
#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    Lit(String),
    Exp(String),
}

pub type Word = Vec<Piece>;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Word(Word),
    Op(&'static str),
}

/// A token and the script line it is on (dash's messages name it).
#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    Simple {
        words: Vec<Word>,
        /// (`>`, `>>`, `2>`, `<`, `2>&1`) and its target (empty for `2>&1`).
        redirs: Vec<(&'static str, Word)>,
        line: usize,
    },
    Pipeline(Vec<Node>),
    /// The first pipeline, then `&&`/`||` and the next.
    AndOr(Box<Node>, Vec<(&'static str, Node)>),
    List(Vec<Node>),
    If {
        branches: Vec<(Node, Node)>,
        otherwise: Option<Box<Node>>,
    },
    For {
        var: String,
        items: Vec<Word>,
        body: Box<Node>,
    },
}

const OPS: [&str; 9] = ["2>&1", "&&", "||", ">>", "2>", ";", "|", ">", "<"];

/// The text of a word if it is plain (unquoted, nothing to expand): reserved words.
fn plain(w: &Word) -> Option<&str> {
    match w.as_slice() {
        [Piece::Exp(s)] if !s.contains('$') => Some(s),
        _ => None,
    }
}

fn push(word: &mut Word, lit: bool, c: char) {
    match (word.last_mut(), lit) {
        (Some(Piece::Lit(s)), true) | (Some(Piece::Exp(s)), false) => s.push(c),
        _ => word.push(if lit {
            Piece::Lit(c.to_string())
        } else {
            Piece::Exp(c.to_string())
        }),
    }
}

/// `$(…)` starting at `cs[i]` (the `$`): the index after its `)`.
fn substitution_end(cs: &[char], i: usize) -> usize {
    let mut depth = 0;
    let mut j = i + 1;
    while j < cs.len() {
        match cs[j] {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
        j += 1;
    }
    cs.len()
}

fn tokenize(text: &str) -> Vec<Token> {
    let mut toks = Vec::new();
    let cs: Vec<char> = text.chars().collect();
    let mut line = 1;
    let mut word: Word = Vec::new();
    let mut in_word = false;
    let mut i = 0;
    let flush = |word: &mut Word, in_word: &mut bool, toks: &mut Vec<Token>, line: usize| {
        if *in_word {
            toks.push(Token {
                tok: Tok::Word(std::mem::take(word)),
                line,
            });
            *in_word = false;
        }
    };
    while i < cs.len() {
        let c = cs[i];
        match c {
            '\n' => {
                flush(&mut word, &mut in_word, &mut toks, line);
                toks.push(Token {
                    tok: Tok::Op(";"),
                    line,
                });
                line += 1;
            }
            '\'' => {
                in_word = true;
                word.push(Piece::Lit(String::new()));
                i += 1;
                while i < cs.len() && cs[i] != '\'' {
                    push(&mut word, true, cs[i]);
                    i += 1;
                }
            }
            '"' => {
                in_word = true;
                word.push(Piece::Lit(String::new()));
                i += 1;
                while i < cs.len() && cs[i] != '"' {
                    match cs[i] {
                        '\\' if i + 1 < cs.len() && matches!(cs[i + 1], '"' | '\\' | '$' | '`') => {
                            push(&mut word, true, cs[i + 1]);
                            i += 1;
                        }
                        '$' if cs.get(i + 1) == Some(&'(') => {
                            let end = substitution_end(&cs, i);
                            for &ch in &cs[i..end] {
                                push(&mut word, false, ch);
                            }
                            i = end - 1;
                        }
                        ch => push(&mut word, ch != '$', ch),
                    }
                    if cs[i] == '$' {
                        // `$NAME` inside quotes: the name's characters expand with it.
                        while i + 1 < cs.len()
                            && (cs[i + 1].is_alphanumeric()
                                || matches!(cs[i + 1], '_' | '?' | '{' | '}'))
                        {
                            i += 1;
                            push(&mut word, false, cs[i]);
                        }
                    }
                    i += 1;
                }
            }
            '\\' if cs.get(i + 1) == Some(&'\n') => {
                line += 1;
                i += 1;
            }
            '\\' if i + 1 < cs.len() => {
                in_word = true;
                push(&mut word, true, cs[i + 1]);
                i += 1;
            }
            '#' if !in_word => {
                while i + 1 < cs.len() && cs[i + 1] != '\n' {
                    i += 1;
                }
            }
            ' ' | '\t' | '\r' => flush(&mut word, &mut in_word, &mut toks, line),
            '$' if cs.get(i + 1) == Some(&'(') => {
                in_word = true;
                let end = substitution_end(&cs, i);
                for &ch in &cs[i..end] {
                    push(&mut word, false, ch);
                }
                i = end - 1;
            }
            _ => {
                let rest: String = cs[i..].iter().take(4).collect();
                let op = OPS
                    .into_iter()
                    .find(|op| rest.starts_with(op) && (!op.starts_with('2') || !in_word));
                match op {
                    Some(op) => {
                        flush(&mut word, &mut in_word, &mut toks, line);
                        toks.push(Token {
                            tok: Tok::Op(op),
                            line,
                        });
                        i += op.len() - 1;
                    }
                    None => {
                        in_word = true;
                        push(&mut word, false, c);
                    }
                }
            }
        }
        i += 1;
    }
    flush(&mut word, &mut in_word, &mut toks, line);
    toks
}

/// A syntax error as dash words it: the line and what it found.
#[derive(Debug, PartialEq)]
pub struct SyntaxError {
    pub line: usize,
    pub msg: String,
}

struct Parser {
    toks: Vec<Token>,
    at: usize,
    last_line: usize,
}

/// Parse a whole script.
pub fn parse(text: &str) -> Result<Node, SyntaxError> {
    let toks = tokenize(text);
    let last_line = toks.last().map_or(1, |t| t.line);
    let mut p = Parser {
        toks,
        at: 0,
        last_line,
    };
    let list = p.list(&[])?;
    match p.toks.get(p.at) {
        None => Ok(list),
        Some(t) => Err(SyntaxError {
            line: t.line,
            msg: format!("\"{}\" unexpected", t.describe()),
        }),
    }
}

impl Token {
    fn describe(&self) -> String {
        match &self.tok {
            Tok::Op(o) => (*o).to_string(),
            Tok::Word(w) => plain(w).unwrap_or("word").to_string(),
        }
    }
}

impl Parser {
    fn peek_word(&self) -> Option<&str> {
        match self.toks.get(self.at).map(|t| &t.tok) {
            Some(Tok::Word(w)) => plain(w),
            _ => None,
        }
    }

    fn skip_separators(&mut self) {
        while matches!(self.toks.get(self.at).map(|t| &t.tok), Some(Tok::Op(";"))) {
            self.at += 1;
        }
    }

    fn line(&self) -> usize {
        self.toks.get(self.at).map_or(self.last_line, |t| t.line)
    }

    fn expect(&mut self, word: &str) -> Result<(), SyntaxError> {
        self.skip_separators();
        if self.peek_word() == Some(word) {
            self.at += 1;
            return Ok(());
        }
        let found = self
            .toks
            .get(self.at)
            .map_or("end of file".to_string(), |t| {
                format!("\"{}\"", t.describe())
            });
        Err(SyntaxError {
            line: self.line(),
            msg: format!("{found} unexpected (expecting \"{word}\")"),
        })
    }

    /// Commands separated by `;`/newlines until one of `stop` (a reserved word) or the end.
    fn list(&mut self, stop: &[&str]) -> Result<Node, SyntaxError> {
        let mut items = Vec::new();
        loop {
            self.skip_separators();
            match self.peek_word() {
                Some(w) if stop.contains(&w) => break,
                _ => {}
            }
            if self.at >= self.toks.len() {
                break;
            }
            items.push(self.and_or()?);
        }
        Ok(Node::List(items))
    }

    fn and_or(&mut self) -> Result<Node, SyntaxError> {
        let first = self.pipeline()?;
        let mut rest = Vec::new();
        while let Some(Tok::Op(op @ ("&&" | "||"))) = self.toks.get(self.at).map(|t| &t.tok) {
            let op = *op;
            self.at += 1;
            self.skip_separators();
            rest.push((op, self.pipeline()?));
        }
        Ok(Node::AndOr(Box::new(first), rest))
    }

    fn pipeline(&mut self) -> Result<Node, SyntaxError> {
        let mut cmds = vec![self.command()?];
        while let Some(Tok::Op("|")) = self.toks.get(self.at).map(|t| &t.tok) {
            self.at += 1;
            self.skip_separators();
            cmds.push(self.command()?);
        }
        Ok(Node::Pipeline(cmds))
    }

    fn command(&mut self) -> Result<Node, SyntaxError> {
        match self.peek_word() {
            Some("if") => return self.if_clause(),
            Some("for") => return self.for_clause(),
            Some(w @ ("then" | "else" | "elif" | "fi" | "do" | "done")) => {
                return Err(SyntaxError {
                    line: self.line(),
                    msg: format!("\"{w}\" unexpected"),
                });
            }
            _ => {}
        }
        let line = self.line();
        let (mut words, mut redirs) = (Vec::new(), Vec::new());
        while let Some(t) = self.toks.get(self.at) {
            match &t.tok {
                Tok::Word(w) => words.push(w.clone()),
                Tok::Op("2>&1") => redirs.push(("2>&1", Vec::new())),
                Tok::Op(op @ (">" | ">>" | "2>" | "<")) => {
                    let op = *op;
                    self.at += 1;
                    match self.toks.get(self.at).map(|t| &t.tok) {
                        Some(Tok::Word(target)) => redirs.push((op, target.clone())),
                        _ => {
                            return Err(SyntaxError {
                                line,
                                msg: "redirection unexpected".into(),
                            });
                        }
                    }
                }
                Tok::Op(_) => break,
            }
            self.at += 1;
        }
        if words.is_empty() && redirs.is_empty() {
            let found = self
                .toks
                .get(self.at)
                .map_or("end of file".to_string(), |t| {
                    format!("\"{}\"", t.describe())
                });
            return Err(SyntaxError {
                line,
                msg: format!("{found} unexpected"),
            });
        }
        Ok(Node::Simple {
            words,
            redirs,
            line,
        })
    }

    fn if_clause(&mut self) -> Result<Node, SyntaxError> {
        self.at += 1; // `if`
        let mut branches = Vec::new();
        let mut otherwise = None;
        loop {
            let cond = self.list(&["then"])?;
            self.expect("then")?;
            let body = self.list(&["elif", "else", "fi"])?;
            branches.push((cond, body));
            self.skip_separators();
            match self.peek_word() {
                Some("elif") => self.at += 1,
                Some("else") => {
                    self.at += 1;
                    otherwise = Some(Box::new(self.list(&["fi"])?));
                    self.expect("fi")?;
                    break;
                }
                _ => {
                    self.expect("fi")?;
                    break;
                }
            }
        }
        Ok(Node::If {
            branches,
            otherwise,
        })
    }

    fn for_clause(&mut self) -> Result<Node, SyntaxError> {
        self.at += 1; // `for`
        let line = self.line();
        let var = match self.peek_word() {
            Some(v) => v.to_string(),
            None => {
                return Err(SyntaxError {
                    line,
                    msg: "Bad for loop variable".into(),
                });
            }
        };
        self.at += 1;
        let mut items = Vec::new();
        if self.peek_word() == Some("in") {
            self.at += 1;
            while let Some(Tok::Word(w)) = self.toks.get(self.at).map(|t| &t.tok) {
                items.push(w.clone());
                self.at += 1;
            }
        }
        self.expect("do")?;
        let body = self.list(&["done"])?;
        self.expect("done")?;
        Ok(Node::For {
            var,
            items,
            body: Box::new(body),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn quotes_decide_what_expands() {
        let toks = tokenize("echo '$HOME' \"a $X\" b\\ c $(id -u)");
        let words: Vec<Word> = toks
            .into_iter()
            .filter_map(|t| match t.tok {
                Tok::Word(w) => Some(w),
                Tok::Op(_) => None,
            })
            .collect();
        assert_eq!(words[1], vec![Piece::Lit("$HOME".into())]);
        assert_eq!(
            words[2],
            vec![Piece::Lit("a ".into()), Piece::Exp("$X".into())]
        );
        assert_eq!(
            words[3],
            vec![
                Piece::Exp("b".into()),
                Piece::Lit(" ".into()),
                Piece::Exp("c".into())
            ]
        );
        assert_eq!(words[4], vec![Piece::Exp("$(id -u)".into())]);
    }

    #[test]
    fn an_unclosed_if_is_dashs_syntax_error() {
        let e = parse("if true; then\n  echo x\n").unwrap_err();
        assert_eq!(e.msg, "end of file unexpected (expecting \"fi\")");
        assert!(parse("for f in a b; do echo $f; done").is_ok());
    }
}
