//! Durations as users write them in parameters and status (`90s`, `15m`, `1h30m`).

use std::time::Duration;

/// Parses `1h30m`, `15m`, `90s`; `None` for anything else.
pub fn parse(s: &str) -> Option<Duration> {
    parse_units(s, &[('h', 3600), ('m', 60), ('s', 1)])
}

/// Parses a sum of numbers each followed by one of `units` (a letter and its seconds); `None`
/// when empty, when a number lacks its unit or a unit its number, or on overflow.
pub fn parse_units(s: &str, units: &[(char, u64)]) -> Option<Duration> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let mut total = 0u64;
    let mut digits = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let n: u64 = digits.parse().ok()?;
        digits.clear();
        let (_, secs) = units.iter().find(|(u, _)| *u == c)?;
        total = total.checked_add(n.checked_mul(*secs)?)?;
    }
    if !digits.is_empty() {
        return None;
    }
    Some(Duration::from_secs(total))
}

/// Formats a duration the way KubeBlocks shows them: `1m12s`, `12s`, `2h3m4s`.
pub fn format(d: Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats() {
        assert_eq!(parse("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse("15m"), Some(Duration::from_secs(900)));
        assert_eq!(parse("15"), None);
        assert_eq!(parse("m"), None);
        assert_eq!(parse("10x"), None);
        assert_eq!(format(Duration::from_secs(72)), "1m12s");
        assert_eq!(format(Duration::from_secs(12)), "12s");
        assert_eq!(format(Duration::from_secs(7384)), "2h3m4s");
    }
}
