//! The hosts file of a run over several processes (`--hosts`): one `host:port` per line, in
//! process index order.

/// The `host:port` lines of a hosts file; blank lines and `#` comments are skipped. An
/// error names the first line that is not `host:port`.
pub fn parse_hosts(text: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let ok = line
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
        if !ok {
            return Err(format!("line {}: `{line}` is not `host:port`", n + 1));
        }
        hosts.push(line.to_string());
    }
    Ok(hosts)
}

#[cfg(test)]
mod tests {
    use super::parse_hosts;

    #[test]
    fn lines_are_host_and_port_with_comments_and_blanks_skipped() {
        let text = "# two processes\nlocalhost:2101\n\n  10.0.0.2:2101  # the other\n";
        assert_eq!(
            parse_hosts(text),
            Ok(vec![
                "localhost:2101".to_string(),
                "10.0.0.2:2101".to_string()
            ])
        );
        assert_eq!(
            parse_hosts("a:1\nb\n"),
            Err("line 2: `b` is not `host:port`".to_string())
        );
        assert!(parse_hosts(":80").is_err());
        assert!(parse_hosts("a:70000").is_err());
        assert_eq!(parse_hosts("[::1]:80"), Ok(vec!["[::1]:80".to_string()]));
    }
}
