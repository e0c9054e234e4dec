//! Resource policies and tag policies (per project).
//!
//! A resource policy names a principal (a role, a member, or an API key),
//! actions (scopes) and resources of one type, chosen by id and/or by a tag
//! selector (no ids and no selector: every resource of the type). It is
//! evaluated after the scope check, for operations on one resource (get,
//! change, delete, trigger, cancel, and job or workflow creation, which is
//! matched by the new resource's tags; an operation on a workflow run is
//! checked against its workflow):
//!
//! 1. a matching `deny` policy that selects the resource refuses (403);
//! 2. when `allow` policies match the principal and action, the resource
//!    must be selected by one of them, else 403;
//! 3. otherwise the scope's answer stands.
//!
//! So policies only narrow what scopes grant; deny wins. The internal
//! secret is never subject to them. Every path that acts on a resource goes
//! through [`authorize`] with the direct operation's action: bulk and group
//! operations check each resource they touch (refusing the whole call when
//! one is refused, except where each item has its own result), and indirect
//! ones (an event's sources) check the target's own action. A credential
//! cannot change or delete a policy that names it. Lists are confined by project and scope,
//! not filtered by policies.
//!
//! A tag policy requires tag keys, or limits the values of a key, on the
//! jobs (later workflows) of its project; a job create or update that breaks
//! one is 422, whoever sends it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use sqlx::PgPool;
use switchyard_shared::domain::{child, FieldError, FieldErrors};
use switchyard_shared::store::policies::PolicyRule;
use switchyard_shared::store::{self, policies::TagRule};

use super::cache::{self, Version};
use super::{CredentialKind, Principal};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// The resource an operation acts on.
pub struct Resource<'a> {
    /// `job`, `job_group`, `run` or `workflow`.
    pub kind: &'static str,
    /// `None` for a resource being created.
    pub id: Option<&'a str>,
    pub tags: &'a BTreeMap<String, String>,
}

/// Whether the rule is about this principal, action and kind of resource.
fn applies_to(rule: &PolicyRule, p: &Principal, action: &str, kind: &str) -> bool {
    rule.resource_type == kind && rule.actions.iter().any(|a| a == action || a == "*") && names(p, rule)
}

/// Whether a policy of `principal_type`/`principal_id` is about this
/// principal, whatever it governs.
pub fn names_principal(p: &Principal, principal_type: &str, principal_id: &str) -> bool {
    match principal_type {
        "api_key" => p.key_id.as_deref() == Some(principal_id),
        "member" => p.kind == CredentialKind::Oidc && p.actor_id.as_deref() == Some(principal_id),
        "role" => p.roles.iter().any(|r| r == principal_id),
        _ => false,
    }
}

fn names(p: &Principal, rule: &PolicyRule) -> bool {
    names_principal(p, &rule.principal_type, &rule.principal_id)
}

/// Whether the rule chooses this resource (by id and by tags).
fn selects(rule: &PolicyRule, r: &Resource<'_>) -> bool {
    let by_id = rule.resource_ids.is_empty() || r.id.is_some_and(|id| rule.resource_ids.iter().any(|x| x == id));
    let by_tags = rule.tag_selector.iter().all(|(k, v)| r.tags.get(k) == Some(v));
    by_id && by_tags
}

/// Pure evaluation, for the rules of the resource's project.
pub fn decide(rules: &[PolicyRule], p: &Principal, action: &str, r: &Resource<'_>) -> Result<(), String> {
    let matching: Vec<&PolicyRule> = rules.iter().filter(|rule| applies_to(rule, p, action, r.kind)).collect();
    if let Some(deny) = matching.iter().find(|rule| rule.effect == "deny" && selects(rule, r)) {
        return Err(format!("resource policy {} denies {action} on this {}", deny.id, r.kind));
    }
    let allows: Vec<&&PolicyRule> = matching.iter().filter(|rule| rule.effect == "allow").collect();
    if !allows.is_empty() && !allows.iter().any(|rule| selects(rule, r)) {
        return Err(format!("no resource policy allows {action} on this {}", r.kind));
    }
    Ok(())
}

async fn rules(state: &AppState, p: &Principal, project_id: &str) -> Result<Arc<Vec<PolicyRule>>, sqlx::Error> {
    let version: Version = match &p.auth_version {
        Some(v) => v.clone(),
        None => cache::current_version(&state.queue).await,
    };
    let key = project_id.to_string();
    if let Some(r) = state.auth.policies.get(&version, &key) {
        return Ok(r);
    }
    let rows = Arc::new(store::policies::rules(&state.pool, project_id).await?);
    state.auth.policies.put(&version, key, rows.clone());
    Ok(rows)
}

/// The one authorization of an action on one resource of `project_id`
/// against the project's resource policies. Every path that acts on a
/// resource calls it with the action the direct operation on that resource
/// needs: a bulk or group operation for each resource it touches, an
/// indirect one (an event triggering a workflow) with the target's own
/// action (`workflows:trigger`), not the action of the route it came in by.
pub async fn authorize(
    state: &AppState,
    p: &Principal,
    project_id: &str,
    action: &str,
    r: Resource<'_>,
) -> ApiResult<()> {
    if p.scopes.is_none() {
        return Ok(());
    }
    let rules = rules(state, p, project_id).await?;
    if rules.is_empty() {
        return Ok(());
    }
    decide(&rules, p, action, &r).map_err(ApiError::forbidden)
}

/// [`authorize`] with the action of the route being served, for the
/// operations whose route acts on the resource directly.
pub async fn check(state: &AppState, p: &Principal, project_id: &str, r: Resource<'_>) -> ApiResult<()> {
    let Some(action) = p.action else { return Ok(()) };
    authorize(state, p, project_id, action, r).await
}

/// Tags of a run (a JSON object of strings) as a map.
pub fn tags_of(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|o| o.iter().filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string()))).collect())
        .unwrap_or_default()
}

/// 422 when the tags break a tag policy of the project for `resource_type`.
pub async fn enforce_tags(
    pool: &PgPool,
    project_id: &str,
    resource_type: &str,
    tags: &BTreeMap<String, String>,
) -> ApiResult<()> {
    let rules: Vec<TagRule> = store::policies::tag_rules(pool, project_id, resource_type).await?;
    Ok(tag_violations(&rules, tags)?)
}

/// Every way the tags break the rules: per rule, each required key that is
/// missing, then each value outside its allowed list.
pub fn tag_violations(rules: &[TagRule], tags: &BTreeMap<String, String>) -> Result<(), Vec<FieldError>> {
    let mut e = FieldErrors::new();
    for rule in rules {
        for k in &rule.required_keys {
            let message = format!("tag policy {} requires the tag {k:?}", rule.id);
            e.check(tags.contains_key(k), child("body.tags", k), message, None);
        }
        for (k, allowed) in &rule.allowed_values {
            if let Some(v) = tags.get(k).filter(|v| !allowed.contains(v)) {
                let message = format!("tag policy {} allows only {allowed:?}", rule.id);
                e.push(child("body.tags", k), message, Some(v.clone().into()));
            }
        }
    }
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::ActorType;

    fn rule(effect: &str, ptype: &str, pid: &str, ids: &[&str], tags: &[(&str, &str)]) -> PolicyRule {
        PolicyRule {
            id: format!("pol_{effect}"),
            effect: effect.into(),
            principal_type: ptype.into(),
            principal_id: pid.into(),
            actions: vec!["jobs:trigger".into()],
            resource_type: "job".into(),
            resource_ids: ids.iter().map(|s| s.to_string()).collect(),
            tag_selector: tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    fn key_principal() -> Principal {
        Principal {
            kind: CredentialKind::ApiKey,
            actor_id: Some("apikey:key_1".into()),
            actor_type: ActorType::ApiKey,
            project_id: Some("p".into()),
            scopes: Some(vec!["*".into()]),
            key_id: Some("key_1".into()),
            roles: vec![],
            run_id: None,
            run_attempt: None,
            action: Some("jobs:trigger"),
            request_id: None,
            auth_version: None,
        }
    }

    #[test]
    fn deny_wins_and_allow_narrows() {
        let p = key_principal();
        let prod: BTreeMap<String, String> = [("env".to_string(), "prod".to_string())].into();
        let dev: BTreeMap<String, String> = [("env".to_string(), "dev".to_string())].into();
        let job = |id, tags| Resource { kind: "job", id: Some(id), tags };
        let deny_prod = rule("deny", "api_key", "key_1", &[], &[("env", "prod")]);
        assert!(decide(std::slice::from_ref(&deny_prod), &p, "jobs:trigger", &job("job_a", &prod)).is_err());
        assert!(decide(std::slice::from_ref(&deny_prod), &p, "jobs:trigger", &job("job_a", &dev)).is_ok());
        assert!(
            decide(std::slice::from_ref(&deny_prod), &p, "jobs:read", &job("job_a", &prod)).is_ok(),
            "other action"
        );
        let allow_a = rule("allow", "api_key", "key_1", &["job_a"], &[]);
        assert!(decide(std::slice::from_ref(&allow_a), &p, "jobs:trigger", &job("job_a", &dev)).is_ok());
        assert!(decide(std::slice::from_ref(&allow_a), &p, "jobs:trigger", &job("job_b", &dev)).is_err());
        assert!(decide(&[allow_a, deny_prod], &p, "jobs:trigger", &job("job_a", &prod)).is_err(), "deny wins");
        let other_key = rule("deny", "api_key", "key_2", &[], &[]);
        assert!(decide(&[other_key], &p, "jobs:trigger", &job("job_a", &dev)).is_ok(), "another principal");
    }

    #[test]
    fn tag_violations_list_missing_keys_then_values_outside_the_allowed() {
        let rule = TagRule {
            id: "tpol_1".into(),
            required_keys: vec!["team".into(), "env".into()],
            allowed_values: [("env".to_string(), vec!["prod".to_string(), "dev".to_string()])].into(),
        };
        let tags = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        assert!(tag_violations(std::slice::from_ref(&rule), &tags(&[("team", "a"), ("env", "dev")])).is_ok());
        assert!(tag_violations(&[], &tags(&[])).is_ok());
        let got = tag_violations(std::slice::from_ref(&rule), &tags(&[("env", "qa")])).unwrap_err();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], FieldError::new("body.tags/team", "tag policy tpol_1 requires the tag \"team\"", None));
        assert_eq!(got[1].location, "body.tags/env");
        assert_eq!(got[1].message, r#"tag policy tpol_1 allows only ["prod", "dev"]"#);
        assert_eq!(got[1].value, Some("qa".into()));
    }
}
