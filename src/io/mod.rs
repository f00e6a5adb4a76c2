//! Files of §11: reading raw contents before semantic analysis (which interns their symbols
//! at the statement that reads them), and writing results atomically after evaluation.

mod read;
mod write;

pub use read::{read_file, RawData, Table};
pub(crate) use write::atomic_write;
pub use write::{write_files, WriteRequest};
