//! The marked section PVE keeps in a container's files (`# --- BEGIN PVE ---` …
//! `# --- END PVE ---`), as `PVE::LXC::Setup::Base::ct_modify_file` and
//! `remove_pve_sections` treat it: PVE's part of a file is replaced on every start, what the
//! user wrote around it stays.

/// The first line of PVE's section.
pub const HEAD: &str = "# --- BEGIN PVE ---";
/// The last line of PVE's section.
pub const TAIL: &str = "# --- END PVE ---";

/// Where PVE's section goes when a file has none yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// After what the file holds (the default).
    Append,
    /// The file becomes the section alone (`replace => 1`: `/etc/resolv.conf`).
    Replace,
}

/// What `ct_modify_file` leaves of a file: `None` when it writes nothing.
///
/// `old` is the file's content (`None`: no such file), `data` PVE's lines for the section.
/// A file with a section gets the section's lines replaced; a file without one gets the
/// section placed by `place`; an empty `data` writes nothing new.
pub fn modify(old: Option<&str>, data: &str, place: Place) -> Option<String> {
    let mut data = data.to_string();
    if !data.is_empty() && !data.ends_with('\n') {
        data.push('\n');
    }
    let section = format!("{HEAD}\n{data}{TAIL}\n");
    let Some(old) = old else {
        return (!data.is_empty()).then_some(section);
    };
    let mut lines = perl_lines(old);
    match section_bounds(&lines) {
        Some((b, e)) => {
            if data.is_empty() && b == 0 && e + 1 == lines.len() {
                // Only PVE's section, nothing to put in it: the file stays as it is.
                return None;
            }
            // PVE splices the section in as one element; without data its tail keeps its
            // newline, which the join then doubles.
            let replacement = if data.is_empty() {
                section
            } else {
                format!("{HEAD}\n{data}{TAIL}")
            };
            lines.splice(b..=e, [replacement]);
            Some(format!("{}\n", lines.join("\n")))
        }
        None if !data.is_empty() => {
            let content = format!("{}\n", lines.join("\n"));
            Some(match place {
                Place::Replace => section,
                Place::Append => format!("{content}{section}"),
            })
        }
        None => None,
    }
}

/// Whether the file has PVE's section (then `modify` rewrites it with default permissions).
pub fn has_section(text: &str) -> bool {
    section_bounds(&perl_lines(text)).is_some()
}

/// The lines opening and closing PVE's section.
fn section_bounds(lines: &[String]) -> Option<(usize, usize)> {
    let beg = lines.iter().position(|l| is_marker(l, "BEGIN", false))?;
    let end = lines[beg + 1..]
        .iter()
        .position(|l| is_marker(l, "END", true))?;
    Some((beg, beg + 1 + end))
}

/// The file without PVE's sections (what `update_etc_hosts` looks at for the user's own
/// localhost lines): from the first line opening a section to the end of the last line
/// closing one, as PVE's greedy match cuts it.
pub fn remove_sections(data: &str) -> String {
    let lines: Vec<&str> = data.split('\n').collect();
    let opens = |l: &&str| l.trim_start_matches([' ', '\t']).starts_with(HEAD);
    let closes = |l: &&str| l.trim_start_matches([' ', '\t']).starts_with(TAIL);
    let Some(first) = lines.iter().position(opens) else {
        return data.to_string();
    };
    let Some(last) = lines.iter().rposition(closes).filter(|&e| e > first) else {
        return data.to_string();
    };
    let mut kept: Vec<&str> = lines[..first].to_vec();
    kept.push("");
    kept.extend(&lines[last + 1..]);
    kept.join("\n")
}

/// `^#\s*---\s*BEGIN\s*PVE\s*` (and the `END` line, case-insensitive as PVE matches it).
fn is_marker(line: &str, word: &str, any_case: bool) -> bool {
    let Some(rest) = line.strip_prefix('#') else {
        return false;
    };
    let Some(rest) = rest.trim_start().strip_prefix("---") else {
        return false;
    };
    let rest = rest.trim_start();
    let (head, rest) = rest.split_at(rest.len().min(word.len()));
    let word_ok = if any_case {
        head.eq_ignore_ascii_case(word)
    } else {
        head == word
    };
    let rest = rest.trim_start();
    let pve = rest.get(..3).unwrap_or("");
    word_ok
        && if any_case {
            pve.eq_ignore_ascii_case("PVE")
        } else {
            pve == "PVE"
        }
}

/// Perl's `split(/\n/, $s)`: trailing empty fields dropped.
pub(super) fn perl_lines(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.split('\n').map(str::to_string).collect();
    while v.last().is_some_and(String::is_empty) {
        v.pop();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_file_is_the_section_alone() {
        assert_eq!(
            modify(None, "ssh-ed25519 AAAA me", Place::Append).as_deref(),
            Some("# --- BEGIN PVE ---\nssh-ed25519 AAAA me\n# --- END PVE ---\n")
        );
        assert_eq!(modify(None, "", Place::Append), None);
    }

    #[test]
    fn the_users_lines_stay_around_the_replaced_section() {
        let old = "127.0.0.1 localhost\n# --- BEGIN PVE ---\n127.0.1.1 old\n# --- END PVE ---\n10.0.0.9 db\n";
        assert_eq!(
            modify(Some(old), "127.0.1.1 new\n", Place::Append).as_deref(),
            Some(
                "127.0.0.1 localhost\n# --- BEGIN PVE ---\n127.0.1.1 new\n# --- END PVE ---\n10.0.0.9 db\n"
            )
        );
    }

    #[test]
    fn without_a_section_it_is_appended_or_replaces_the_file() {
        let old = "nameserver 1.1.1.1\n";
        assert_eq!(
            modify(Some(old), "nameserver 9.9.9.9", Place::Append).as_deref(),
            Some(
                "nameserver 1.1.1.1\n# --- BEGIN PVE ---\nnameserver 9.9.9.9\n# --- END PVE ---\n"
            )
        );
        assert_eq!(
            modify(Some(old), "nameserver 9.9.9.9", Place::Replace).as_deref(),
            Some("# --- BEGIN PVE ---\nnameserver 9.9.9.9\n# --- END PVE ---\n")
        );
        assert_eq!(modify(Some(old), "", Place::Replace), None);
    }

    #[test]
    fn sections_are_cut_out_for_reading() {
        let data = "127.0.0.1 localhost\n  # --- BEGIN PVE ---\n::1 x\n# --- END PVE ---\nlast";
        assert_eq!(remove_sections(data), "127.0.0.1 localhost\n\nlast");
        assert_eq!(remove_sections("no section\n"), "no section\n");
    }
}
