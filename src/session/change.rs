//! One staged change as `tl watch` reads it from standard input: `+Edge(1, 2)` inserts a
//! fact, `-Edge(1, 2)` removes one.

/// A fact to insert or remove, with its fields as written (symbols or numbers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// `+` inserts, `-` removes.
    pub insert: bool,
    /// The relation.
    pub relation: String,
    /// Its fields, unquoted; quoted fields keep their commas.
    pub fields: Vec<String>,
}

impl Change {
    /// Reads `+Relation(a, b)` or `-Relation(a, b)` (a trailing `.` allowed); `None` for
    /// anything else.
    pub fn parse(line: &str) -> Option<Change> {
        let insert = match line.chars().next()? {
            '+' => true,
            '-' => false,
            _ => return None,
        };
        let rest = line[1..].trim().trim_end_matches('.').trim();
        let open = rest.find('(')?;
        let name = rest[..open].trim();
        let args = rest[open + 1..].strip_suffix(')')?;
        if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
            return None;
        }
        let mut fields = Vec::new();
        let (mut cur, mut quoted) = (String::new(), false);
        for c in args.chars() {
            match c {
                '"' => quoted = !quoted,
                ',' if !quoted => fields.push(std::mem::take(&mut cur).trim().to_string()),
                c => cur.push(c),
            }
        }
        if quoted {
            return None;
        }
        if !cur.trim().is_empty() || !fields.is_empty() {
            fields.push(cur.trim().to_string());
        }
        Some(Change {
            insert,
            relation: name.to_string(),
            fields,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Change;

    #[test]
    fn facts_are_read_with_their_sign() {
        let f = |s: &str| Change::parse(s).map(|c| (c.insert, c.relation, c.fields.join("|")));
        assert_eq!(f("+Edge(1, 2)"), Some((true, "Edge".into(), "1|2".into())));
        assert_eq!(f("-Edge(1,2)."), Some((false, "Edge".into(), "1|2".into())));
        assert_eq!(
            f("+Name(\"a, b\", C)"),
            Some((true, "Name".into(), "a, b|C".into()))
        );
        assert_eq!(f("+Flag()"), Some((true, "Flag".into(), String::new())));
        assert_eq!(f("Edge(1, 2)"), None);
        assert_eq!(f("+Edge(1, 2"), None);
        assert_eq!(f("+(1)"), None);
        assert_eq!(f("+"), None);
        assert_eq!(f(""), None);
    }
}
