fn main() {
    println!("vm-lab: see README.md");
}
