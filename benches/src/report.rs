//! Medians and spreads of repeated measurements, and the JSON-lines files results go to.

/// Median of a non-empty sample (mean of the middle two for even sizes).
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// Median of the values a measurement produced (`None` where it had none), if any.
pub(crate) fn median_of_present(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let present: Vec<f64> = values.into_iter().flatten().collect();
    (!present.is_empty()).then(|| median(&present))
}

/// (min, max) of a sample.
pub(crate) fn spread(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
}

/// Writes `rows` to `path` as JSON lines (one object per row) and says so on stderr.
pub(crate) fn write_json_lines<T: serde::Serialize>(
    path: &std::path::Path,
    rows: &[T],
) -> anyhow::Result<()> {
    let mut text = String::new();
    for row in rows {
        text.push_str(&serde_json::to_string(row)?);
        text.push('\n');
    }
    std::fs::write(path, text)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// Reads back what [`write_json_lines`] wrote: one object per non-empty line.
pub(crate) fn read_json_lines<T: serde::de::DeserializeOwned>(
    path: &std::path::Path,
) -> anyhow::Result<Vec<T>> {
    use anyhow::Context;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| format!("{}: line {}", path.display(), i + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_spread() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(spread(&[4.0, 1.0, 2.0]), (1.0, 4.0));
        assert_eq!(
            median_of_present([Some(3.0), None, Some(1.0), Some(2.0)]),
            Some(2.0)
        );
        assert_eq!(median_of_present([None, None]), None);
    }
}
