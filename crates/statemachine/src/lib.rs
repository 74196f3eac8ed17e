//! Declared step graphs (placeholder until the crate lands).
