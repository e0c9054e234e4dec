//! Cron expressions and time zones as a job or a workflow saves them:
//! checked here, evaluated by [`super::schedule`].

use std::str::FromStr;

/// Checks a cron expression of 5 fields, or 6 with seconds first. The
/// day-of-week field is standard cron's: 0 or 7 is Sunday, 1 Monday ... 6
/// Saturday, or the names SUN..SAT (the `cron` crate numbers Sunday 1, so
/// numbers are translated). A day-of-month and a day-of-week that are both
/// restricted must both match.
pub fn parse_cron(expr: &str) -> Result<cron::Schedule, String> {
    let mut fields: Vec<String> = expr.split_whitespace().map(str::to_string).collect();
    match fields.len() {
        5 => fields.insert(0, "0".into()),
        6 => {}
        n => return Err(format!("expected 5 fields, or 6 with seconds first; got {n}")),
    }
    fields[5] = crate_day_of_week(&fields[5])?;
    cron::Schedule::from_str(&fields.join(" ")).map_err(|e| e.to_string())
}

/// A standard cron day-of-week field as the `cron` crate's (Sunday = 1):
/// the days it names, spelled out as a list.
fn crate_day_of_week(field: &str) -> Result<String, String> {
    if field == "*" || field == "?" {
        return Ok(field.to_string());
    }
    const NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
    let day = |s: &str| -> Result<u32, String> {
        let up = s.to_ascii_uppercase();
        if let Some(i) = NAMES.iter().position(|n| *n == up) {
            return Ok(i as u32);
        }
        match s.parse::<u32>() {
            Ok(n) if n <= 7 => Ok(n),
            _ => Err(format!("invalid day of week {s:?}: use 0-7 (0 and 7 are Sunday) or SUN-SAT")),
        }
    };
    let mut days = [false; 7];
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => match s.parse::<u32>() {
                Ok(s) if s > 0 => (r, s),
                _ => return Err(format!("invalid step in day of week {item:?}")),
            },
            None => (item, 1),
        };
        let (lo, hi) = match range.split_once('-') {
            _ if range == "*" => (0, 6),
            Some((a, b)) => (day(a)?, day(b)?),
            // `a/s` runs from a to the end of the week.
            None if item.contains('/') => (day(range)?, 6),
            None => (day(range)?, day(range)?),
        };
        if lo > hi {
            return Err(format!("invalid day of week range {range:?}"));
        }
        let mut d = lo;
        while d <= hi {
            days[(d % 7) as usize] = true;
            d += step;
        }
    }
    let list: Vec<String> = (0..7).filter(|d| days[*d as usize]).map(|d: u32| (d + 1).to_string()).collect();
    Ok(list.join(","))
}

pub fn parse_timezone(tz: &str) -> Result<chrono_tz::Tz, String> {
    tz.parse::<chrono_tz::Tz>().map_err(|_| format!("{tz:?} is not an IANA time zone such as Europe/Paris"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_takes_five_or_six_fields() {
        assert!(parse_cron("*/5 * * * *").is_ok());
        assert!(parse_cron("*/10 * * * * *").is_ok());
        assert!(parse_cron("* * *").is_err());
    }

    #[test]
    fn day_of_week_is_standard_cron() {
        use chrono::TimeZone;
        // 2027-01-04 is a Monday, 2027-01-10 a Sunday.
        let monday = chrono::Utc.with_ymd_and_hms(2027, 1, 4, 12, 0, 0).unwrap();
        let sunday = chrono::Utc.with_ymd_and_hms(2027, 1, 10, 12, 0, 0).unwrap();
        for (expr, on_monday, on_sunday) in [
            ("0 12 * * 1-5", true, false),
            ("0 12 * * MON-FRI", true, false),
            ("0 12 * * 0", false, true),
            ("0 12 * * 7", false, true),
            ("0 12 * * 5-7", false, true),
            ("0 12 * * */2", false, true),
            ("0 12 * * 1/3", true, false),
            ("0 12 * * 1,sun", true, true),
            ("0 12 * * *", true, true),
        ] {
            let s = parse_cron(expr).unwrap();
            assert_eq!((s.includes(monday), s.includes(sunday)), (on_monday, on_sunday), "{expr}");
        }
        assert!(parse_cron("0 12 * * 8").is_err());
        assert!(parse_cron("0 12 * * 5-1").is_err());
    }
}
