//! What the library reads from and writes to the machine: files of §11 (raw contents read
//! before semantic analysis, which interns their symbols at the statement that reads them;
//! results written atomically after evaluation) and the memory an evaluation may use.

mod memory;
mod read;
mod write;

pub(crate) use memory::default_max_memory;
pub(crate) use read::{read_file, read_program_files, ProgramFiles, RawData, Table};
pub(crate) use write::atomic_write;
pub(crate) use write::{write_files, WriteRequest};
