//! What is qualified: the embedded cluster haq starts ([`sim`]) or the deployment it
//! reaches (`url`), the registry of its replicas and their processes, replacement and
//! readiness.

pub mod sim;
