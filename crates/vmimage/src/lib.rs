use std::path::{Path, PathBuf};
#[derive(Debug)]
pub struct Error(String);
impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
pub type Result<T> = std::result::Result<T, Error>;
pub struct ImageOptions {
    pub out: PathBuf,
    pub tandem_exe: PathBuf,
    pub kernel_package: String,
    pub cache_dir: Option<PathBuf>,
    pub data_disk_bytes: Option<u64>,
    pub quiet: bool,
}
pub struct Image {
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    pub kernel_version: String,
    pub data_disk: Option<PathBuf>,
    pub manifest: PathBuf,
}
pub fn build(_o: &ImageOptions) -> Result<Image> {
    Err(Error("stub".into()))
}
pub fn make_data_disk(_p: &Path, _b: u64) -> Result<()> {
    Err(Error("stub".into()))
}
pub fn open(_d: &Path) -> Result<Image> {
    Err(Error("stub".into()))
}
