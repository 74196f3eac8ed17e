//! A routed request as the resource handlers see it: typed path ids, query and body, and
//! the body decoded against the route's request schema (the 422s FastAPI gives).

use std::collections::HashMap;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::reply::ApiError;
use crate::sim::Sim;

/// One API request after routing.
#[derive(Debug)]
pub struct ApiReq {
    pub method: String,
    /// The OpenAPI template without the `/api/v2` prefix.
    pub route: String,
    pub ids: HashMap<String, Uuid>,
    pub params: HashMap<String, String>,
    pub query: HashMap<String, String>,
    pub body: Option<Value>,
    /// `scheme://host` the client used, for absolute URLs in answers.
    pub base: String,
}

impl ApiReq {
    pub fn id(&self, name: &str) -> Uuid {
        self.ids.get(name).copied().unwrap_or_default()
    }

    pub fn q(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str)
    }

    pub fn q_bool(&self, name: &str) -> Result<bool, ApiError> {
        match self.q(name) {
            None => Ok(false),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err(ApiError::invalid(
                    "bool_parsing",
                    vec![json!("query"), json!(name)],
                    "Input should be a valid boolean, unable to interpret input",
                    json!(v),
                )),
            },
        }
    }

    pub fn format(&self, default: &str) -> Result<String, ApiError> {
        match self.q("response-format") {
            None => Ok(default.into()),
            Some(f @ ("empty" | "full" | "identifier")) => Ok(f.into()),
            Some(other) => Err(ApiError::invalid(
                "enum",
                vec![json!("query"), json!("response-format")],
                "Input should be 'empty', 'full' or 'identifier'",
                json!(other),
            )),
        }
    }

    pub fn has_key(&self, key: &str) -> bool {
        self.body
            .as_ref()
            .and_then(Value::as_object)
            .is_some_and(|o| o.contains_key(key))
    }

    /// The full template, for spec lookups.
    pub fn template(&self) -> String {
        format!("/api/v2{}", self.route)
    }

    /// The answer to a route the document has and sbsim does not serve.
    pub fn unsimulated(&self) -> ApiError {
        ApiError::opaque(format!(
            "sbsim does not simulate {} {}",
            self.method, self.route
        ))
    }
}

/// Check the body against the route's request schema (FastAPI's 422) and decode it.
pub fn body<T: DeserializeOwned>(sim: &Sim, req: &ApiReq) -> Result<T, ApiError> {
    let Some((schema, required)) = sim.spec.request_schema(&req.method, &req.template()) else {
        return serde_json::from_value(req.body.clone().unwrap_or(Value::Null)).map_err(|e| {
            ApiError::invalid(
                "value_error",
                vec![json!("body")],
                &e.to_string(),
                Value::Null,
            )
        });
    };
    let instance = match &req.body {
        Some(v) => v.clone(),
        None if required => {
            return Err(ApiError::invalid(
                "missing",
                vec![json!("body")],
                "Field required",
                Value::Null,
            ));
        }
        None => Value::Null,
    };
    let issues = sim.spec.validate(&schema, &instance);
    if !issues.is_empty() {
        return Err(ApiError::Validation(
            issues
                .into_iter()
                .map(|i| {
                    let mut loc = vec![json!("body")];
                    loc.extend(i.loc);
                    json!({"type": i.kind, "loc": loc, "msg": i.msg, "input": i.input})
                })
                .collect(),
        ));
    }
    serde_json::from_value(instance).map_err(|e| {
        ApiError::invalid(
            "value_error",
            vec![json!("body")],
            &e.to_string(),
            Value::Null,
        )
    })
}
