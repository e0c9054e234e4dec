//! A run under version_policy `latest` follows its workflow's newest
//! version: at the first pass after the workflow changed, the run moves to
//! it. Steps new in it are added (pending), steps it dropped that had not
//! started are removed, and steps that ran stay as they are, whatever the
//! new version says of them.

use serde_json::json;

use super::effects::{Note, StepView};
use crate::domain::workflow::SavedStep;
use crate::domain::workflow_run::StepStatus;
use crate::ids::StepRunId;

/// What a move to another version changes.
#[derive(Clone, Debug, PartialEq)]
pub struct VersionMove {
    /// The rows of the steps the new version dropped that had not started.
    pub drop: Vec<StepRunId>,
    /// The new version's steps the run has no row for, to add pending.
    pub add: Vec<SavedStep>,
    pub note: Note,
}

/// The move of a run on `from_version_id`, whose steps are `rows`, to
/// version `version` (`version_id`), whose steps are `to`.
pub fn move_to(
    rows: &[StepView],
    from_version_id: &str,
    to: &[SavedStep],
    version_id: &str,
    version: i32,
) -> VersionMove {
    let kept = |r: &str| to.iter().any(|s| s.def.step_ref == r);
    let drop =
        rows.iter().filter(|r| r.status == StepStatus::Pending && !kept(r.step_ref)).map(|r| r.id.clone()).collect();
    let add = to.iter().filter(|s| !rows.iter().any(|r| r.step_ref == s.def.step_ref)).cloned().collect();
    let note = Note {
        step_ref: None,
        decision_type: "version_moved".into(),
        reason: format!("version_policy latest: now on version {version}"),
        details: json!({ "from_version_id": from_version_id, "to_version_id": version_id }),
    };
    VersionMove { drop, add, note }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved(refs: &[&str]) -> Vec<SavedStep> {
        refs.iter()
            .map(|r| serde_json::from_value(json!({"id": format!("wfs_{r}"), "step_ref": r, "job_id": "j"})).unwrap())
            .collect()
    }

    fn row<'a>(id: &'a StepRunId, step_ref: &'a str, status: StepStatus) -> StepView<'a> {
        StepView { id, ..StepView::test(step_ref, "job", status) }
    }

    #[test]
    fn new_steps_are_added_dropped_pending_ones_removed_and_steps_that_ran_stay() {
        let ids = ["st_a", "st_b", "st_c", "st_d", "st_e"].map(StepRunId::from);
        let rows = [
            row(&ids[0], "a", StepStatus::Completed),
            row(&ids[1], "b", StepStatus::Pending),
            row(&ids[2], "c", StepStatus::Running),
            row(&ids[3], "d", StepStatus::Failed),
            row(&ids[4], "e", StepStatus::Pending),
        ];
        // The new version keeps a and e, drops b, c and d, and adds f.
        let m = move_to(&rows, "wfv_1", &saved(&["a", "e", "f"]), "wfv_2", 2);
        assert_eq!(m.drop, ["st_b"], "only a dropped step that had not started goes");
        assert_eq!(m.add.iter().map(|s| s.def.step_ref.as_str()).collect::<Vec<_>>(), ["f"]);
        assert_eq!(m.note.decision_type, "version_moved");
        assert_eq!(m.note.reason, "version_policy latest: now on version 2");
        assert_eq!(m.note.details, json!({"from_version_id": "wfv_1", "to_version_id": "wfv_2"}));
    }

    #[test]
    fn a_move_to_the_same_steps_changes_no_step() {
        let ids = ["st_a", "st_b"].map(StepRunId::from);
        let rows = [row(&ids[0], "a", StepStatus::Pending), row(&ids[1], "b", StepStatus::Completed)];
        let m = move_to(&rows, "wfv_1", &saved(&["a", "b"]), "wfv_2", 2);
        assert!(m.drop.is_empty() && m.add.is_empty());
    }
}
