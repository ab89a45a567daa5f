pub mod ioprio;
pub mod request;
