//! A run's `error_class`: a short classification of why it did not
//! complete. The service writes its own (`target_failed`, `timed_out`,
//! `dependency_failed`, ...); a target that fails its run over the SDK may
//! give any class of its own (`ProviderDown`, `provider.down`, `quota 429`),
//! so the only rules are the ones that keep it displayable and bounded.

/// Longest error_class, in characters.
pub const MAX_ERROR_CLASS_CHARS: usize = 200;
/// The rule [`check`] checks, as the document states it.
pub const RULE: super::rules::Text = super::rules::Text::label(1, MAX_ERROR_CLASS_CHARS);

/// Whether `class` is 1 to [`MAX_ERROR_CLASS_CHARS`] characters, not blank,
/// without control characters; the message says what is wrong.
pub fn check(class: &str) -> Result<(), String> {
    if !RULE.ok(class) {
        return Err(format!("1 to {MAX_ERROR_CLASS_CHARS} printable characters, not blank"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_printable_class_is_accepted() {
        for ok in
            ["target_failed", "ProviderDown", "provider.down", "quota exceeded (429)", "fournisseur-indisponible/é"]
        {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        assert!(check(&"é".repeat(MAX_ERROR_CLASS_CHARS)).is_ok(), "the bound counts characters, not bytes");
    }

    #[test]
    fn blank_long_or_control_characters_are_refused() {
        for bad in [String::new(), "   ".into(), "a\nb".into(), "tab\there".into(), "\u{0}".into(), "x".repeat(201)] {
            assert!(check(&bad).is_err(), "{bad:?}");
        }
    }
}
