//! Reading `.npy` files defensively.
//!
//! The header is parsed and checked against the length of the file before anything is
//! allocated, so a truncated, corrupted or hostile file ends in one clear message: never in an
//! allocation the header asked for (a header may claim `(100000, 100000)` over 64 bytes of
//! data), a panic, or a stack overflow on a deeply nested header. `ndarray-npy`, which the tools
//! use to write, allocates what the header says before it reads the data, so reading goes
//! through here instead.
//!
//! The format (NumPy's `numpy.lib.format`): the magic string `\x93NUMPY`, a major and a minor
//! version byte, the header length (2 bytes little-endian in version 1, 4 bytes in versions 2
//! and 3), the header (a Python dict literal such as
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }`), then the data.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use ndarray::{ArrayD, IxDyn, ShapeBuilder};

/// The magic string every `.npy` file starts with.
const MAGIC: &[u8] = b"\x93NUMPY";

/// How deeply a header's Python literal may nest (a structured dtype nests 3 or 4 levels).
const MAX_DEPTH: usize = 32;

/// What a header describes: the element type, the layout and the shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// The dtype as written, e.g. `<f4`, `|b1`, or `[...]` for a structured dtype.
    pub descr: String,
    /// The element type, when `descr` is a simple one.
    pub dtype: Option<Dtype>,
    /// Whether the data is stored column-major (Fortran order).
    pub fortran_order: bool,
    /// The array's shape.
    pub shape: Vec<usize>,
    /// Where the data starts, in bytes from the start of the file.
    pub data_offset: u64,
}

/// A simple dtype: byte order, kind and size, as in `<f4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dtype {
    /// `<` little-endian, `>` big-endian, `|` not applicable (one byte), `=` native.
    pub order: char,
    /// NumPy's kind code: `f` float, `i` signed, `u` unsigned, `b` bool, `c` complex, ...
    pub kind: char,
    /// Bytes per element (for strings, per item: `<U10` is 40 bytes).
    pub size: usize,
}

impl Dtype {
    /// `float32`, `int64`, `bool`, ...: the name NumPy prints for the dtype.
    pub fn plain_name(&self) -> String {
        let bits = self.size * 8;
        match self.kind {
            'f' => format!("float{bits}"),
            'i' => format!("int{bits}"),
            'u' => format!("uint{bits}"),
            'b' if self.size == 1 => "bool".into(),
            'c' => format!("complex{bits}"),
            'U' => "a unicode string".into(),
            'S' | 'a' => "a byte string".into(),
            'O' => "Python objects".into(),
            'M' => "datetime64".into(),
            'm' => "timedelta64".into(),
            'V' => "raw bytes (void)".into(),
            _ => "an unknown dtype".into(),
        }
    }
}

/// The dtype of a header in words: `int64 ('<i8')`, or the structured dtype as written.
pub fn describe(header: &Header) -> String {
    match header.dtype {
        Some(dtype) => format!("{} ('{}')", dtype.plain_name(), header.descr),
        None => format!("a structured dtype ({})", header.descr),
    }
}

/// Reads and checks the header of the `.npy` file at `path`. The error is the problem alone
/// (the caller adds the file name).
pub fn read_header(path: &Path) -> Result<Header, String> {
    let mut file = File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let metadata = file.metadata().map_err(|e| format!("cannot read: {e}"))?;
    if metadata.is_dir() {
        return Err("cannot read: it is a directory".into());
    }
    let len = metadata.len();
    let invalid = |what: String| format!("not a valid .npy file: {what}");
    if len < 10 {
        return Err(invalid(format!(
            "it is {len} byte{} long, shorter than the smallest .npy header",
            if len == 1 { "" } else { "s" }
        )));
    }
    let mut prefix = [0u8; 12];
    let take = len.min(12) as usize;
    file.read_exact(&mut prefix[..take]).map_err(|e| format!("cannot read: {e}"))?;
    if &prefix[..6] != MAGIC {
        return Err(invalid("it does not start with the .npy magic string \\x93NUMPY".into()));
    }
    let (major, minor) = (prefix[6], prefix[7]);
    let (header_len, start) = match major {
        1 => (u16::from_le_bytes([prefix[8], prefix[9]]) as u64, 10u64),
        2 | 3 if take == 12 => {
            (u32::from_le_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]) as u64, 12u64)
        }
        2 | 3 => {
            return Err(invalid(format!("it is {len} bytes long, shorter than its header")));
        }
        _ => {
            return Err(invalid(format!(
                "format version {major}.{minor} (this tool reads versions 1, 2 and 3)"
            )));
        }
    };
    let data_offset = start + header_len;
    if data_offset > len {
        return Err(invalid(format!(
            "the header claims {header_len} bytes but the file has only {} after the prefix \
             (truncated?)",
            len - start
        )));
    }
    let mut raw = vec![0u8; header_len as usize]; // at most the file's own length
    file.seek(SeekFrom::Start(start)).map_err(|e| format!("cannot read: {e}"))?;
    file.read_exact(&mut raw).map_err(|e| format!("cannot read: {e}"))?;
    let text = std::str::from_utf8(&raw)
        .map_err(|_| invalid("its header is not text".into()))?
        .trim_end_matches(['\n', ' ', '\0']);
    let value = Parser { text, pos: 0 }
        .whole()
        .map_err(|e| invalid(format!("cannot parse its header {}: {e}", shorten(text))))?;
    let header = header_from(value, data_offset).map_err(invalid)?;
    if header.dtype.is_some_and(|d| d.kind == 'O') {
        return Err(format!(
            "object arrays are not supported: its dtype is {}, which np.save writes as a \
             Python pickle, not as numbers; save a numeric array instead, e.g. \
             np.save(path, np.asarray(a, dtype=np.float32))",
            describe(&header)
        ));
    }
    let expected = data_bytes(&header).map_err(invalid)?;
    let actual = len - data_offset;
    if actual != expected {
        return Err(invalid(format!(
            "its header says {} of shape {}, which is {expected} bytes of data, but the file \
             has {actual} bytes after the header ({})",
            describe(&header),
            shape_text(&header.shape),
            if actual < expected { "truncated or corrupted" } else { "extra bytes" }
        )));
    }
    Ok(header)
}

/// The number of data bytes the header describes, with overflow reported.
fn data_bytes(header: &Header) -> Result<u64, String> {
    let size = header
        .dtype
        .map(|d| d.size)
        .ok_or_else(|| format!("it has {}, which this tool cannot size", describe(header)))?;
    header
        .shape
        .iter()
        .try_fold(size as u64, |acc, &n| acc.checked_mul(n as u64))
        .filter(|&bytes| bytes <= isize::MAX as u64)
        .ok_or_else(|| format!("its shape {} is too large to exist", shape_text(&header.shape)))
}

/// `(2, 3, 4)`.
pub fn shape_text(shape: &[usize]) -> String {
    let parts: Vec<String> = shape.iter().map(usize::to_string).collect();
    match parts.len() {
        1 => format!("({},)", parts[0]),
        _ => format!("({})", parts.join(", ")),
    }
}

/// The first 60 characters of a header, for messages.
fn shorten(text: &str) -> String {
    let mut short: String = text.chars().take(60).collect();
    if short.len() < text.len() {
        short.push_str("...");
    }
    format!("{short:?}")
}

/// An element type the tools decode.
pub trait Element: Sized + Copy {
    /// NumPy's kind and size: `('f', 4)` for `f32`.
    const KIND: (char, usize);
    /// Decodes one element from its bytes in the given byte order (`<`, `>` or `|`).
    fn decode(bytes: &[u8], big_endian: bool) -> Result<Self, String>;
}

impl Element for f32 {
    const KIND: (char, usize) = ('f', 4);
    fn decode(b: &[u8], big: bool) -> Result<Self, String> {
        let bytes = [b[0], b[1], b[2], b[3]];
        Ok(if big { f32::from_be_bytes(bytes) } else { f32::from_le_bytes(bytes) })
    }
}

impl Element for f64 {
    const KIND: (char, usize) = ('f', 8);
    fn decode(b: &[u8], big: bool) -> Result<Self, String> {
        let bytes = [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
        Ok(if big { f64::from_be_bytes(bytes) } else { f64::from_le_bytes(bytes) })
    }
}

impl Element for bool {
    const KIND: (char, usize) = ('b', 1);
    fn decode(b: &[u8], _: bool) -> Result<Self, String> {
        match b[0] {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(format!("a bool entry holds the byte {other}, not 0 or 1")),
        }
    }
}

/// Whether the header's dtype is `A`'s (either byte order).
pub fn holds<A: Element>(header: &Header) -> bool {
    header.dtype.is_some_and(|d| (d.kind, d.size) == A::KIND && matches!(d.order, '<' | '>' | '|'))
}

/// Reads the data of a file whose header [`read_header`] returned and [`holds`] `A`.
pub fn read_data<A: Element>(path: &Path, header: &Header) -> Result<ArrayD<A>, String> {
    let dtype = header.dtype.filter(|_| holds::<A>(header)).ok_or("wrong dtype")?;
    let count: usize = header.shape.iter().product(); // checked by read_header
    let mut file = File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    file.seek(SeekFrom::Start(header.data_offset)).map_err(|e| format!("cannot read: {e}"))?;
    let mut file = BufReader::new(file);
    let mut data = Vec::with_capacity(count);
    let mut chunk = vec![0u8; dtype.size * 4096];
    let mut left = count;
    while left > 0 {
        let n = left.min(4096);
        let bytes = &mut chunk[..n * dtype.size];
        file.read_exact(bytes).map_err(|e| format!("cannot read: {e}"))?;
        for element in bytes.chunks_exact(dtype.size) {
            data.push(
                A::decode(element, dtype.order == '>')
                    .map_err(|e| format!("not a valid .npy file: {e}"))?,
            );
        }
        left -= n;
    }
    let shape = IxDyn(&header.shape);
    let array = if header.fortran_order {
        ArrayD::from_shape_vec(shape.f(), data)
    } else {
        ArrayD::from_shape_vec(shape, data)
    };
    array.map_err(|e| format!("not a valid .npy file: {e}"))
}

/// The header's Python literal.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Str(String),
    Bool(bool),
    Int(u64),
    /// A tuple (`true`) or a list (`false`).
    Seq(Vec<Value>, bool),
    Dict(Vec<(Value, Value)>),
}

/// Builds the header from the parsed dict: exactly `descr`, `fortran_order` and `shape`.
fn header_from(value: Value, data_offset: u64) -> Result<Header, String> {
    let Value::Dict(entries) = value else {
        return Err("its header is not a dict".into());
    };
    let (mut descr, mut fortran_order, mut shape) = (None, None, None);
    for (key, value) in entries {
        match (key, value) {
            (Value::Str(k), Value::Str(d)) if k == "descr" => descr = Some((d.clone(), dtype(&d))),
            (Value::Str(k), d @ Value::Seq(..)) if k == "descr" => {
                descr = Some((literal(&d), None));
            }
            (Value::Str(k), Value::Bool(b)) if k == "fortran_order" => fortran_order = Some(b),
            (Value::Str(k), Value::Seq(dims, _)) if k == "shape" => {
                let dims: Option<Vec<usize>> = dims
                    .iter()
                    .map(|d| match d {
                        Value::Int(n) => usize::try_from(*n).ok(),
                        _ => None,
                    })
                    .collect();
                shape = Some(dims.ok_or("its shape is not a tuple of whole numbers")?);
            }
            (Value::Str(k), v) => {
                return Err(format!("its header has an unexpected entry '{k}': {}", literal(&v)));
            }
            (k, _) => {
                return Err(format!("its header has a key {} that is not a name", literal(&k)));
            }
        }
    }
    let missing = |name: &str| format!("its header has no '{name}'");
    let (descr, dtype) = descr.ok_or_else(|| missing("descr"))?;
    Ok(Header {
        descr,
        dtype,
        fortran_order: fortran_order.ok_or_else(|| missing("fortran_order"))?,
        shape: shape.ok_or_else(|| missing("shape"))?,
        data_offset,
    })
}

/// `<f4` → order `<`, kind `f`, size 4; `<U10` → 40 bytes per item.
fn dtype(descr: &str) -> Option<Dtype> {
    let mut chars = descr.chars();
    let order = chars.next().filter(|c| matches!(c, '<' | '>' | '|' | '='))?;
    let kind = chars.next().filter(char::is_ascii_alphabetic)?;
    let digits = chars.as_str();
    let count: usize = if digits.is_empty() && matches!(kind, 'O') {
        8
    } else {
        digits.parse().ok().filter(|&n| n > 0)?
    };
    let size = match kind {
        'U' => count.checked_mul(4)?, // UTF-32: 4 bytes per character
        'M' | 'm' => 8,               // datetime64[ns] and friends: always 8 bytes
        _ => count,
    };
    Some(Dtype { order, kind, size })
}

/// A value written back as Python, for messages.
fn literal(value: &Value) -> String {
    match value {
        Value::Str(s) => format!("'{s}'"),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Int(n) => n.to_string(),
        Value::Seq(items, tuple) => {
            let inside = items.iter().map(literal).collect::<Vec<_>>().join(", ");
            if *tuple { format!("({inside})") } else { format!("[{inside}]") }
        }
        Value::Dict(entries) => {
            let parts: Vec<String> =
                entries.iter().map(|(k, v)| format!("{}: {}", literal(k), literal(v))).collect();
            format!("{{{}}}", parts.join(", "))
        }
    }
}

/// A recursive-descent parser for the Python literals a header may hold: strings, `True`,
/// `False`, whole numbers, tuples, lists and dicts, nested at most [`MAX_DEPTH`] deep.
struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    /// The whole text is one value.
    fn whole(mut self) -> Result<Value, String> {
        let value = self.value(0)?;
        self.skip_space();
        if self.pos != self.text.len() {
            return Err(format!("unexpected text after the dict at byte {}", self.pos));
        }
        Ok(value)
    }

    fn skip_space(&mut self) {
        let rest = &self.text[self.pos..];
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn peek(&mut self) -> Option<char> {
        self.skip_space();
        self.text[self.pos..].chars().next()
    }

    fn expect(&mut self, c: char) -> Result<(), String> {
        match self.peek() {
            Some(got) if got == c => {
                self.pos += c.len_utf8();
                Ok(())
            }
            Some(got) => Err(format!("expected '{c}' at byte {} but found '{got}'", self.pos)),
            None => Err(format!("expected '{c}' but the header ended")),
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("it nests deeper than {MAX_DEPTH} levels"));
        }
        match self.peek() {
            Some('{') => self.dict(depth),
            Some('(') => self.seq(depth, '(', ')'),
            Some('[') => self.seq(depth, '[', ']'),
            Some(q @ ('\'' | '"')) => self.string(q),
            Some(c) if c.is_ascii_digit() => self.int(),
            Some(c) if c.is_ascii_alphabetic() => {
                let rest = &self.text[self.pos..];
                let word_len =
                    rest.find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(rest.len());
                let word = &rest[..word_len];
                self.pos += word_len;
                match word {
                    "True" => Ok(Value::Bool(true)),
                    "False" => Ok(Value::Bool(false)),
                    _ => Err(format!("unexpected name {word:?}")),
                }
            }
            Some(c) => Err(format!("unexpected '{c}' at byte {}", self.pos)),
            None => Err("the header ended early".into()),
        }
    }

    fn dict(&mut self, depth: usize) -> Result<Value, String> {
        self.expect('{')?;
        let mut entries = Vec::new();
        while self.peek() != Some('}') {
            let key = self.value(depth + 1)?;
            self.expect(':')?;
            let value = self.value(depth + 1)?;
            entries.push((key, value));
            if self.peek() == Some(',') {
                self.pos += 1;
            } else {
                break;
            }
        }
        self.expect('}')?;
        Ok(Value::Dict(entries))
    }

    fn seq(&mut self, depth: usize, open: char, close: char) -> Result<Value, String> {
        self.expect(open)?;
        let mut items = Vec::new();
        while self.peek() != Some(close) {
            items.push(self.value(depth + 1)?);
            if self.peek() == Some(',') {
                self.pos += 1;
            } else {
                break;
            }
        }
        self.expect(close)?;
        Ok(Value::Seq(items, open == '('))
    }

    fn string(&mut self, quote: char) -> Result<Value, String> {
        self.pos += 1; // the opening quote
        let rest = &self.text[self.pos..];
        let end = rest.find(quote).ok_or("a string in the header is not closed")?;
        let s = &rest[..end];
        if s.contains('\\') {
            return Err("a string in the header has an escape sequence".into());
        }
        self.pos += end + 1;
        Ok(Value::Str(s.to_string()))
    }

    fn int(&mut self) -> Result<Value, String> {
        let rest = &self.text[self.pos..];
        let len = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let n =
            rest[..len].parse().map_err(|_| format!("the number {} is too large", &rest[..len]))?;
        self.pos += len;
        if self.text[self.pos..].starts_with('L') {
            self.pos += 1; // Python 2 wrote long integers as 3L
        }
        Ok(Value::Int(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Header, String> {
        Parser { text, pos: 0 }.whole().and_then(|v| header_from(v, 128))
    }

    #[test]
    fn headers_numpy_writes() {
        let h = parse("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }").unwrap();
        assert_eq!(
            (h.dtype.unwrap().plain_name(), h.shape.as_slice()),
            ("float32".into(), &[3, 4][..])
        );
        let h = parse("{'descr': '|b1', 'fortran_order': True, 'shape': (5,), }").unwrap();
        assert!(h.fortran_order && h.shape == [5] && h.dtype.unwrap().plain_name() == "bool");
        assert_eq!(
            parse("{'descr': '<f8', 'fortran_order': False, 'shape': ()}").unwrap().shape,
            Vec::<usize>::new()
        );
        assert_eq!(
            parse("{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": \">f8\"}")
                .unwrap()
                .shape,
            [2, 3]
        );
        let structured = parse(
            "{'descr': [('x', '<f4'), ('y', '<i8')], 'fortran_order': False, 'shape': (2,), }",
        )
        .unwrap();
        assert!(structured.dtype.is_none());
        assert_eq!(describe(&structured), "a structured dtype ([('x', '<f4'), ('y', '<i8')])");
    }

    #[test]
    fn dtype_names() {
        let name = |d: &str| dtype(d).unwrap().plain_name();
        assert_eq!(name("<i8"), "int64");
        assert_eq!(name("<u2"), "uint16");
        assert_eq!(name("<f2"), "float16");
        assert_eq!(name("<c16"), "complex128");
        assert_eq!(name("<U10"), "a unicode string");
        assert_eq!(dtype("<U10").unwrap().size, 40);
        assert_eq!(name("|O"), "Python objects");
        assert!(dtype("f4").is_none() && dtype("<f0").is_none() && dtype("<").is_none());
    }

    #[test]
    fn malformed_headers_are_errors_not_panics() {
        for bad in [
            "",
            "{",
            "{'descr': '<f4'",
            "{'descr': '<f4', 'fortran_order': False}",
            "{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'extra': 1}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}",
            "{'descr': 'ab\\'c', 'fortran_order': False, 'shape': (1,)}",
            "[1, 2]",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} trailing",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be refused");
        }
        let deep = format!("{}{}", "(".repeat(10_000), ")".repeat(10_000));
        let err = parse(&deep).unwrap_err();
        assert!(err.contains("nests deeper"), "{err}");
    }

    #[test]
    fn sizes_are_checked_before_anything_is_allocated() {
        let huge =
            parse("{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000), }").unwrap();
        assert_eq!(data_bytes(&huge).unwrap(), 40_000_000_000);
        let overflow =
            parse("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }")
                .unwrap();
        assert!(data_bytes(&overflow).unwrap_err().contains("too large"));
    }
}
