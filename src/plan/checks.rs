//! Small checks every part of validation uses.

use crate::scenario::Issue;

pub fn pos_finite(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

pub fn positive(field: &str, d: crate::wire::units::Dur) -> Result<(), Issue> {
    if d.0.is_zero() {
        Err(Issue::new(field, d, "must be greater than 0"))
    } else {
        Ok(())
    }
}

pub fn at_least(field: &str, v: u32, min: u32) -> Result<(), Issue> {
    if v < min {
        Err(Issue::new(field, v, format!("must be at least {min}")))
    } else {
        Ok(())
    }
}
