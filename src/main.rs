fn main() {
    println!("provision-harness: see README.md");
}
