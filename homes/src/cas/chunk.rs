//! Content-defined chunking: FastCDC (2020) with a minimum of [`MIN`], an average of [`AVG`] and
//! a maximum of [`MAX`] bytes. Small chunks keep what an edit costs small (an edit changes the one
//! or two chunks around it); the average is a trade between that and the number of ids a big
//! file's tree entry lists.

use super::CasError;
use std::io::Read;

pub const MIN: u32 = 16 << 10;
pub const AVG: u32 = 64 << 10;
pub const MAX: u32 = 256 << 10;

/// Calls `each` with every chunk of `source`, in order. An empty source has no chunk.
pub fn chunks<R: Read>(
    source: R,
    mut each: impl FnMut(&[u8]) -> Result<(), CasError>,
) -> Result<(), CasError> {
    for chunk in fastcdc::v2020::StreamCDC::new(source, MIN, AVG, MAX) {
        let chunk = chunk.map_err(|e| match e {
            fastcdc::v2020::Error::IoError(io) => CasError::Io(io),
            other => CasError::Io(std::io::Error::other(other.to_string())),
        })?;
        each(&chunk.data)?;
    }
    Ok(())
}
