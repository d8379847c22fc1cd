//! Just enough ELF64 reading for the image builder: a binary's interpreter and NEEDED
//! libraries (to copy its shared-library closure) and a kernel module's `.modinfo` strings
//! (to load modules in dependency order without `depmod`).

const PT_INTERP: u32 = 3;
const SHT_DYNAMIC: u32 = 6;
const DT_NEEDED: u64 = 1;

/// What an ELF64 binary needs at run time, from its program headers and dynamic section.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Dynamic {
    /// The program interpreter (`PT_INTERP`), e.g. `/lib64/ld-linux-x86-64.so.2`; `None` for a
    /// static binary.
    pub interpreter: Option<String>,
    /// The `DT_NEEDED` library names (sonames such as `libc.so.6`), in file order.
    pub needed: Vec<String>,
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(off..off + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off + 8)?.try_into().ok()?))
}
fn usize_at(b: &[u8], off: usize) -> Option<usize> {
    usize::try_from(u64_at(b, off)?).ok()
}
fn cstr_at(b: &[u8], off: usize) -> Option<String> {
    let tail = b.get(off..)?;
    let end = tail.iter().position(|&c| c == 0)?;
    Some(String::from_utf8_lossy(&tail[..end]).into_owned())
}

/// True for a 64-bit little-endian ELF file.
pub fn is_elf64(b: &[u8]) -> bool {
    b.len() > 64 && &b[..4] == b"\x7fELF" && b[4] == 2 && b[5] == 1
}

struct Section {
    kind: u32,
    offset: usize,
    size: usize,
    link: u32,
    name: u32,
}

fn sections(b: &[u8]) -> Option<Vec<Section>> {
    let shoff = usize_at(b, 0x28)?;
    let shentsize = usize::from(u16_at(b, 0x3A)?);
    let shnum = usize::from(u16_at(b, 0x3C)?);
    let mut out = Vec::with_capacity(shnum);
    for i in 0..shnum {
        let h = shoff.checked_add(i.checked_mul(shentsize)?)?;
        out.push(Section {
            name: u32_at(b, h)?,
            kind: u32_at(b, h + 4)?,
            offset: usize_at(b, h + 0x18)?,
            size: usize_at(b, h + 0x20)?,
            link: u32_at(b, h + 0x28)?,
        });
    }
    Some(out)
}

/// Interpreter and NEEDED entries of an ELF64 file; empty for static binaries.
pub fn dynamic_info(b: &[u8]) -> Option<Dynamic> {
    if !is_elf64(b) {
        return None;
    }
    let mut info = Dynamic::default();
    let phoff = usize_at(b, 0x20)?;
    let phentsize = usize::from(u16_at(b, 0x36)?);
    let phnum = usize::from(u16_at(b, 0x38)?);
    for i in 0..phnum {
        let h = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(b, h)? == PT_INTERP {
            let off = usize_at(b, h + 8)?;
            info.interpreter = cstr_at(b, off);
        }
    }
    let secs = sections(b)?;
    for s in secs.iter().filter(|s| s.kind == SHT_DYNAMIC) {
        let strtab = secs.get(usize::try_from(s.link).ok()?)?;
        let mut off = s.offset;
        while off + 16 <= s.offset + s.size {
            let tag = u64_at(b, off)?;
            let val = usize_at(b, off + 8)?;
            if tag == 0 {
                break;
            }
            if tag == DT_NEEDED
                && let Some(name) = cstr_at(b, strtab.offset + val)
            {
                info.needed.push(name);
            }
            off += 16;
        }
    }
    Some(info)
}

/// The `key=value` strings of a kernel module's `.modinfo` section.
pub fn modinfo(b: &[u8]) -> Option<Vec<(String, String)>> {
    if !is_elf64(b) {
        return None;
    }
    let secs = sections(b)?;
    let shstrndx = usize::from(u16_at(b, 0x3E)?);
    let names = secs.get(shstrndx)?;
    let sec = secs
        .iter()
        .find(|s| cstr_at(b, names.offset + s.name as usize).as_deref() == Some(".modinfo"))?;
    let data = b.get(sec.offset..sec.offset + sec.size)?;
    Some(
        data.split(|&c| c == 0)
            .filter(|s| !s.is_empty())
            .filter_map(|s| {
                let s = String::from_utf8_lossy(s);
                s.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_elf_is_rejected() {
        assert!(dynamic_info(b"#!/bin/sh\necho hi\n").is_none());
        assert!(modinfo(&[0u8; 10]).is_none());
    }

    #[test]
    fn reads_a_real_dynamic_binary() {
        // The test binary itself is a dynamic ELF64 linked against libc.
        let exe = std::env::current_exe().expect("exe");
        let bytes = std::fs::read(exe).expect("read");
        let info = dynamic_info(&bytes).expect("elf");
        assert!(
            info.needed.iter().any(|n| n.starts_with("libc.so")),
            "{info:?}"
        );
        assert!(info.interpreter.is_some());
    }
}
