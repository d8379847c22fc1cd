fn main() {
    println!("fake-proxmox: see README.md");
}
