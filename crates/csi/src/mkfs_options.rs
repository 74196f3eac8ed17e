//! The mkfs options a StorageClass may give in `mkfs_options`, per filesystem (pure).
//!
//! The options reach mkfs on the node, run as root, as arguments of their own. An option
//! that names a file would hand whoever writes a StorageClass the node's filesystem
//! (`mke2fs -d <dir>` copies a host directory into the volume, `mkfs.xfs -p <file>` reads
//! one, external log and realtime devices write to another disk). So only options that
//! shape the filesystem's geometry and features are accepted, each with a value of the
//! form it takes: numbers where a number is expected, suboptions and feature names from a
//! fixed alphabet, never a path.
//!
//! | fs   | accepted |
//! |------|----------|
//! | ext4 | `-L <label>`, `-b <block size>`, `-i <bytes per inode>`, `-I <inode size>`, `-N <inodes>`, `-m <reserved %>`, `-O <feature>[,^<feature>…]`, `-E` with `lazy_itable_init=0\|1`, `lazy_journal_init=0\|1`, `stride=<n>`, `stripe_width=<n>`, `discard`, `nodiscard` |
//! | xfs  | `-L <label>`, `-b size=<size>`, `-s size=<size>`, `-n size=<size>`, `-i` with `size=<size>`, `maxpct=<n>`, `nrext64=0\|1`, `sparse=0\|1`, `-l` with `size=<size>`, `lazy-count=0\|1`, `-m` with `crc`, `finobt`, `reflink`, `rmapbt`, `bigtime`, `inobtcount` `=0\|1` |
//!
//! A `<size>` is a whole number with an optional `k`, `m` or `g`. The xfs stripe geometry
//! has parameters of its own (`xfs_su`, `xfs_sw`).

use crate::error::{CsiError, Result};

/// Filesystems the driver formats and mounts: the ones this module has an option table for.
pub const SUPPORTED_FS: &[&str] = &["ext4", "xfs"];

/// One accepted option and the value it takes.
struct Allowed {
    flag: &'static str,
    value: Value,
    /// How the option is written, for the error that lists what is accepted.
    shape: &'static str,
}

#[derive(Clone, Copy)]
enum Value {
    Number,
    /// A decimal number from 0 to 50.
    Percent,
    /// ext4 feature names, comma-separated, each may be negated with `^`.
    Features,
    /// A filesystem label of at most this many letters, digits, `-`, `_` and `.`.
    Label(usize),
    /// Comma-separated suboptions from the list.
    Sub(&'static [(&'static str, Sub)]),
}

#[derive(Clone, Copy)]
enum Sub {
    Number,
    Size,
    Bool,
    /// A suboption without a value.
    Flag,
}

const EXT4: &[Allowed] = &[
    Allowed {
        flag: "-L",
        value: Value::Label(16),
        shape: "-L <label>",
    },
    Allowed {
        flag: "-b",
        value: Value::Number,
        shape: "-b <block size>",
    },
    Allowed {
        flag: "-i",
        value: Value::Number,
        shape: "-i <bytes per inode>",
    },
    Allowed {
        flag: "-I",
        value: Value::Number,
        shape: "-I <inode size>",
    },
    Allowed {
        flag: "-N",
        value: Value::Number,
        shape: "-N <number of inodes>",
    },
    Allowed {
        flag: "-m",
        value: Value::Percent,
        shape: "-m <reserved blocks percentage>",
    },
    Allowed {
        flag: "-O",
        value: Value::Features,
        shape: "-O <feature>[,^<feature>...]",
    },
    Allowed {
        flag: "-E",
        value: Value::Sub(&[
            ("lazy_itable_init", Sub::Bool),
            ("lazy_journal_init", Sub::Bool),
            ("stride", Sub::Number),
            ("stripe_width", Sub::Number),
            ("discard", Sub::Flag),
            ("nodiscard", Sub::Flag),
        ]),
        shape: "-E lazy_itable_init=0|1,lazy_journal_init=0|1,stride=<n>,stripe_width=<n>,discard,nodiscard",
    },
];

const XFS_BOOLEAN_FEATURES: &[(&str, Sub)] = &[
    ("crc", Sub::Bool),
    ("finobt", Sub::Bool),
    ("reflink", Sub::Bool),
    ("rmapbt", Sub::Bool),
    ("bigtime", Sub::Bool),
    ("inobtcount", Sub::Bool),
];

const XFS: &[Allowed] = &[
    Allowed {
        flag: "-L",
        value: Value::Label(12),
        shape: "-L <label>",
    },
    Allowed {
        flag: "-b",
        value: Value::Sub(&[("size", Sub::Size)]),
        shape: "-b size=<size>",
    },
    Allowed {
        flag: "-s",
        value: Value::Sub(&[("size", Sub::Size)]),
        shape: "-s size=<size>",
    },
    Allowed {
        flag: "-n",
        value: Value::Sub(&[("size", Sub::Size)]),
        shape: "-n size=<size>",
    },
    Allowed {
        flag: "-i",
        value: Value::Sub(&[
            ("size", Sub::Size),
            ("maxpct", Sub::Number),
            ("nrext64", Sub::Bool),
            ("sparse", Sub::Bool),
        ]),
        shape: "-i size=<size>,maxpct=<n>,nrext64=0|1,sparse=0|1",
    },
    Allowed {
        flag: "-l",
        value: Value::Sub(&[("size", Sub::Size), ("lazy-count", Sub::Bool)]),
        shape: "-l size=<size>,lazy-count=0|1",
    },
    Allowed {
        flag: "-m",
        value: Value::Sub(XFS_BOOLEAN_FEATURES),
        shape: "-m crc=0|1,finobt=0|1,reflink=0|1,rmapbt=0|1,bigtime=0|1,inobtcount=0|1",
    },
];

fn allowed(fs: &str) -> &'static [Allowed] {
    match fs {
        "ext4" => EXT4,
        "xfs" => XFS,
        _ => &[],
    }
}

/// What the driver accepts for `fs`, as the errors list it.
pub fn accepted(fs: &str) -> String {
    let shapes: Vec<&str> = allowed(fs).iter().map(|a| a.shape).collect();
    format!(
        "mkfs.{fs} takes only {} (a <size> is a number with an optional k, m or g)",
        shapes.join("; ")
    )
}

/// Check an option list, split at whitespace, for formatting `fs`.
pub fn check(fs: &str, words: &[String]) -> Result<()> {
    first_problem(fs, words).map_or(Ok(()), |problem| {
        Err(CsiError::InvalidArgument(format!(
            "parameter mkfs_options: {problem}; {}",
            accepted(fs)
        )))
    })
}

/// Check an option list whose filesystem is not known yet (a block volume, or a class
/// read before its capability): it must suit one of the filesystems the driver formats.
pub fn check_any(words: &[String]) -> Result<()> {
    let problems: Vec<String> = SUPPORTED_FS
        .iter()
        .map(|fs| first_problem(fs, words).map(|p| format!("for {fs}, {p} ({})", accepted(fs))))
        .collect::<Option<Vec<_>>>()
        .unwrap_or_default();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CsiError::InvalidArgument(format!(
            "parameter mkfs_options suits no filesystem the driver formats: {}",
            problems.join("; ")
        )))
    }
}

fn first_problem(fs: &str, words: &[String]) -> Option<String> {
    let table = allowed(fs);
    let mut i = 0;
    while i < words.len() {
        let flag = words[i].as_str();
        let Some(a) = table.iter().find(|a| a.flag == flag) else {
            return Some(if flag.starts_with('-') {
                format!("{flag:?} is not an option the driver passes to mkfs.{fs}")
            } else {
                format!("{flag:?} is not an option (each option is a flag and its value, apart)")
            });
        };
        let Some(value) = words.get(i + 1) else {
            return Some(format!("{flag} needs a value"));
        };
        if let Some(why) = value_problem(a.value, value) {
            return Some(format!("{flag} {value:?}: {why}"));
        }
        i += 2;
    }
    None
}

fn is_number(v: &str) -> bool {
    !v.is_empty() && v.len() <= 19 && v.bytes().all(|b| b.is_ascii_digit())
}

fn is_size(v: &str) -> bool {
    let digits = v.strip_suffix(['k', 'm', 'g', 'K', 'M', 'G']).unwrap_or(v);
    is_number(digits)
}

fn value_problem(value: Value, v: &str) -> Option<String> {
    match value {
        Value::Number => (!is_number(v)).then(|| "is not a whole number".to_string()),
        Value::Percent => {
            let ok = v.bytes().all(|b| b.is_ascii_digit() || b == b'.')
                && v.parse::<f64>().is_ok_and(|p| (0.0..=50.0).contains(&p));
            (!ok).then(|| "is not a percentage from 0 to 50".to_string())
        }
        Value::Label(max) => {
            let ok = !v.is_empty()
                && v.len() <= max
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            (!ok).then(|| {
                format!("is not a label: at most {max} letters, digits, '-', '_' and '.'")
            })
        }
        Value::Features => v.split(',').find_map(|f| {
            let name = f.strip_prefix('^').unwrap_or(f);
            let ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            (!ok).then(|| {
                format!(
                    "feature {f:?} is not a feature name (lowercase letters, digits and _, with ^ in front to turn it off)"
                )
            })
        }),
        Value::Sub(subs) => v.split(',').find_map(|item| {
            let (key, val) = match item.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (item, None),
            };
            let Some((_, kind)) = subs.iter().find(|(k, _)| *k == key) else {
                return Some(format!("suboption {key:?} is not accepted"));
            };
            let ok = match (kind, val) {
                (Sub::Flag, None) => true,
                (Sub::Number, Some(n)) => is_number(n),
                (Sub::Size, Some(n)) => is_size(n),
                (Sub::Bool, Some(n)) => n == "0" || n == "1",
                _ => false,
            };
            (!ok).then(|| {
                let wants = match kind {
                    Sub::Flag => "takes no value",
                    Sub::Number => "takes a whole number",
                    Sub::Size => "takes a size",
                    Sub::Bool => "takes 0 or 1",
                };
                format!("suboption {key} {wants}")
            })
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn geometry_and_feature_options_are_accepted() {
        for ok in [
            "-b 4096",
            "-b 4096 -i 16384 -I 256 -N 100000 -m 0.5 -L data-1",
            "-O ^orphan_file,metadata_csum,64bit",
            "-E lazy_itable_init=0,lazy_journal_init=0,stride=16,stripe_width=64,nodiscard",
        ] {
            check("ext4", &words(ok)).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for ok in [
            "-b size=4096",
            "-s size=4k -n size=8192",
            "-i size=512,maxpct=25,nrext64=0,sparse=1",
            "-l size=64m,lazy-count=1",
            "-m crc=1,reflink=0,finobt=1,rmapbt=0,bigtime=1,inobtcount=1",
        ] {
            check("xfs", &words(ok)).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    #[test]
    fn options_that_reach_beyond_the_volume_are_refused() {
        // Regression: mkfs_options went to mkfs verbatim, so `-d <dir>` copied a host
        // directory into the volume.
        for (fs, bad, names) in [
            ("ext4", "-d /etc", "\"-d\""),
            ("ext4", "-b 4096 -d /etc", "\"-d\""),
            ("ext4", "-E root_owner=0:0", "root_owner"),
            ("ext4", "-E stride=16,offset=1", "offset"),
            ("ext4", "-b /dev/sda", "\"/dev/sda\""),
            ("ext4", "-b4096", "\"-b4096\""),
            ("ext4", "-m 60", "percentage"),
            ("ext4", "-O has_journal,/x", "\"/x\""),
            ("ext4", "-b", "needs a value"),
            ("ext4", "4096", "\"4096\""),
            ("ext4", "-F", "\"-F\""),
            ("ext4", "-L ../../x", "label"),
            ("xfs", "-p /etc/protofile", "\"-p\""),
            ("xfs", "-l logdev=/dev/sdb", "logdev"),
            ("xfs", "-l size=../x", "size"),
            ("xfs", "-r rtdev=/dev/sdb", "\"-r\""),
            ("xfs", "-d file=1,name=/x", "\"-d\""),
            ("xfs", "-b 4096", "\"4096\""),
            ("xfs", "-m crc=2", "crc takes 0 or 1"),
            ("xfs", "-f", "\"-f\""),
        ] {
            let e = check(fs, &words(bad)).expect_err(bad);
            assert!(matches!(e, CsiError::InvalidArgument(_)), "{bad}: {e}");
            let text = e.to_string();
            assert!(text.contains(names), "{bad}: {text}");
            assert!(
                text.contains(&format!("mkfs.{fs} takes only -L <label>; -b ")),
                "the error lists what is accepted: {text}"
            );
        }
    }

    #[test]
    fn an_unknown_filesystem_is_checked_against_both() {
        assert!(check_any(&words("-b 4096")).is_ok(), "ext4");
        assert!(check_any(&words("-b size=4096")).is_ok(), "xfs");
        let e = check_any(&words("-d /etc")).expect_err("neither");
        let text = e.to_string();
        assert!(
            text.contains("for ext4, \"-d\"") && text.contains("for xfs, \"-d\""),
            "{text}"
        );
    }
}
