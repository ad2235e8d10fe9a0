//! junit.xml: one testcase per verdict, for CI test reporting. FAIL is a `<failure>`,
//! UNKNOWN an `<error>` (evidence missing: not a pass), NOT_EVALUATED `<skipped>` with
//! the reason; the evidence lines go to the testcase's `<system-out>`.

use std::fmt::Write;

use crate::check::{Judgement, Status};
use crate::plan::Plan;

/// Escapes text for XML attributes and content, dropping characters XML 1.0 forbids.
pub fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

pub fn render(plan: &Plan, j: &Judgement) -> String {
    let name = format!("haq.{}", plan.scenario.name);
    let n = j.verdicts.len();
    let count = |s: Status| j.verdicts.iter().filter(|v| v.status == s).count();
    let invalid = j.invalid();
    let (failures, skipped) = (count(Status::Fail), count(Status::NotEvaluated));
    let errors = if invalid {
        n - failures - skipped
    } else {
        count(Status::Unknown)
    };
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"haq\" tests=\"{n}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\">"
    );
    let _ = writeln!(
        out,
        "  <testsuite name=\"{}\" tests=\"{n}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\" timestamp=\"{}\">",
        xml(&name),
        xml(&j.run.wall)
    );
    out.push_str("    <properties>\n");
    let props = [
        ("scenario", plan.scenario.name.clone()),
        ("seed", plan.seed.to_string()),
        ("result", j.result().to_string()),
        ("protected_load", plan.scenario.protected_load.to_string()),
        ("complete", j.run.complete.to_string()),
    ];
    for (k, v) in props {
        let _ = writeln!(out, "      <property name=\"{k}\" value=\"{}\"/>", xml(&v));
    }
    out.push_str("    </properties>\n");
    for v in &j.verdicts {
        let _ = write!(
            out,
            "    <testcase classname=\"{}\" name=\"{}\">",
            xml(&name),
            xml(v.name.as_str())
        );
        let evidence = v.evidence.join("\n");
        let body = match (v.status, invalid) {
            (Status::Fail, _) => format!(
                "\n      <failure type=\"FAIL\" message=\"{}\">{}</failure>",
                xml(&v.summary),
                xml(&evidence)
            ),
            (Status::NotEvaluated, _) => {
                format!("\n      <skipped message=\"{}\"/>", xml(&v.summary))
            }
            (_, true) => format!(
                "\n      <error type=\"INVALID\" message=\"{}\">{}</error>",
                xml(&format!(
                    "the run is INVALID ({}): {}",
                    j.client.reasons().join("; "),
                    v.summary
                )),
                xml(&evidence)
            ),
            (Status::Unknown, false) => format!(
                "\n      <error type=\"UNKNOWN\" message=\"{}\">{}</error>",
                xml(&v.summary),
                xml(&evidence)
            ),
            (Status::Pass, false) => String::new(),
        };
        out.push_str(&body);
        let sysout = format!("{}\n{}", v.summary, evidence);
        let _ = write!(
            out,
            "\n      <system-out>{}</system-out>\n    </testcase>\n",
            xml(sysout.trim_end())
        );
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testkit::*;

    #[test]
    fn a_failed_verdict_is_a_failure_an_unknown_an_error_and_text_is_escaped() {
        let p = plan(&["criteria.routing.traffic_removal_max=1s", "name=a-b"]);
        let mut tb = standard(&p);
        // Keep routing to the dead worker: Routing FAILs.
        for k in 0..20 {
            tb.gw(
                us(13.5 + k as f64 * 0.5),
                crate::wire::journal::GatewayEntry::AttemptStart {
                    req: format!("x<{k}>&"),
                    attempt: format!("x{k}/a1"),
                    worker: "w2".into(),
                    delivered: 0,
                },
            );
        }
        let j = tb.judge(&p);
        let x = render(&p, &j);
        assert!(x.contains("<testcase classname=\"haq.a-b\" name=\"Routing\">\n      <failure type=\"FAIL\" message=\"kill-w2: traffic removed from w2"), "{x}");
        assert!(x.contains("attempt of x&lt;19&gt;&amp; sent to w2"), "{x}");
        assert!(x.contains("<skipped message=\"the scenario has no overload phase\"/>"));
        assert_eq!(x.matches("<testcase ").count(), 8);
        assert!(x.contains("failures=\"1\""), "{x}");

        // Without the journal and the headers, Routing is UNKNOWN: an error, not a pass.
        let mut tb = Tb::new().without_journal();
        tb.headers = false;
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.inject("kill-w2", "w2", us(13.0), true);
        tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w3"]));
        tb.run_end(us(32.0));
        let x = render(&p, &tb.judge(&p));
        assert!(
            x.contains("<error type=\"UNKNOWN\" message=\"kill-w2: no routing evidence"),
            "{x}"
        );
    }

    #[test]
    fn xml_escaping_drops_what_xml_forbids() {
        assert_eq!(xml("a<b>&\"c'\u{1}\td"), "a&lt;b&gt;&amp;&quot;c&apos;\td");
    }
}
