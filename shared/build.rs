// `sqlx::migrate!` embeds the migrations when this crate compiles; without
// this line cargo does not know that a new or edited migration means
// compiling it again, and a build would carry the old set.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
