//! The writing verbs of the stand-in: create (POST), update (PUT, with the real
//! server's optimistic concurrency when the object carries a resourceVersion) and delete,
//! with the real server's checks of kind, namespace and name against the URL.

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{json, Value};

use super::serve::{json_response, status, Body, Shared, Target};
use super::store::StoreError;

/// The largest request body accepted (the real server's limit is 3 MiB).
const MAX_BODY: usize = 3 << 20;

pub async fn read_object(req: Request<Incoming>) -> Result<Value, Response<Body>> {
    let bytes = Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| {
            status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!("reading the body: {e}"),
                None,
            )
        })?
        .to_bytes();
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| {
        let msg = format!("the body is not JSON (YAML is not accepted): {e}");
        bad_request(&msg)
    })?;
    // Checked here so that the field assignments below cannot meet a non-object.
    if !v.is_object() || !v["metadata"].is_object() {
        return Err(bad_request(
            "the body is not an object with a metadata object",
        ));
    }
    Ok(v)
}

fn bad_request(msg: &str) -> Response<Body> {
    status(StatusCode::BAD_REQUEST, "BadRequest", msg, None)
}

/// POST (create) or PUT (update) of `obj` at `t`.
pub fn write(shared: &Shared, t: &Target, mut obj: Value, update: bool) -> Response<Body> {
    let r = t.resource;
    if obj["apiVersion"].as_str() != Some(&r.api_version()) || obj["kind"].as_str() != Some(r.kind)
    {
        return bad_request(&format!(
            "the object's apiVersion/kind ({}/{}) is not {}/{} of {}",
            obj["apiVersion"],
            obj["kind"],
            r.api_version(),
            r.kind,
            r.plural
        ));
    }
    let body_ns = obj["metadata"]["namespace"].as_str().map(str::to_string);
    match (&t.namespace, body_ns) {
        (Some(path_ns), Some(b)) if *path_ns != b => {
            return bad_request("the namespace of the provided object does not match the namespace sent on the request");
        }
        (Some(path_ns), _) => obj["metadata"]["namespace"] = json!(path_ns),
        (None, _) => {}
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    if update && t.name.as_deref() != Some(name.as_str()) {
        return bad_request("the name of the object does not match the name on the URL");
    }
    let named = Target {
        res: t.res,
        resource: t.resource,
        namespace: t.namespace.clone(),
        name: Some(name.clone()),
    };
    let mut store = shared.store();
    // An update carrying a resourceVersion must be of the current object (optimistic
    // concurrency); one without is unconditional, as on the real server.
    if let (true, Some(sent)) = (update, obj["metadata"]["resourceVersion"].as_str()) {
        let current = store
            .get(&named.key())
            .map(|o| o["metadata"]["resourceVersion"].clone());
        if current.as_ref().is_some_and(|c| c.as_str() != Some(sent)) {
            let msg = format!("Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again", named.qualified());
            return status(
                StatusCode::CONFLICT,
                "Conflict",
                &msg,
                Some(named.details()),
            );
        }
    }
    match store.write(t.res, obj, Some(update)) {
        Ok(o) => json_response(
            if update {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            },
            &o,
        ),
        Err(StoreError::AlreadyExists) => {
            let msg = format!("{} {name:?} already exists", named.qualified());
            status(
                StatusCode::CONFLICT,
                "AlreadyExists",
                &msg,
                Some(named.details()),
            )
        }
        Err(StoreError::NotFound) => named.not_found(),
        Err(StoreError::Invalid(m)) => status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            &m,
            Some(named.details()),
        ),
        Err(StoreError::Expired { .. }) => bad_request("expired"),
    }
}

pub fn delete(shared: &Shared, t: &Target) -> Response<Body> {
    if t.name.is_none() {
        let msg = "deleting a whole collection is not supported by this stand-in";
        return status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            msg,
            Some(t.details()),
        );
    }
    match shared.store().delete(&t.key()) {
        Ok(o) => json_response(StatusCode::OK, &o),
        Err(_) => t.not_found(),
    }
}
