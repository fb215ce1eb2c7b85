//! The protocols between hostpull's programs ([`crate::confined`]): each
//! module is what both sides of one boundary import, so that neither side
//! defines what the other reads.

pub mod agent;
pub mod import;
pub mod layout;
